/** Where the queue's Redis is: one server (a `redis://` URL as ioredis reads it) or a Redis Cluster. */
export type RedisTarget =
  | { kind: 'server'; url: string }
  | {
      kind: 'cluster'
      /** The startup nodes: any reachable one tells ioredis about every other node. */
      nodes: Array<{ host: string; port: number }>
      tls: boolean
      username: string | undefined
      password: string | undefined
    }

const CLUSTER_SCHEME = /^(rediss?)\+cluster:\/\/(.*)$/

/**
 * Reads REDIS_URL. `redis+cluster://[user:password@]host:port,host:port,…` (or `rediss+cluster://`
 * for TLS) names a cluster by some of its nodes; a WHATWG URL cannot hold several hosts, so the list
 * is split here and each node read as a `redis://` URL of its own. Throws naming what is wrong.
 */
export function parseRedisUrl(url: string): RedisTarget {
  const cluster = CLUSTER_SCHEME.exec(url)
  if (cluster === null) {
    if (!/^rediss?:\/\//.test(url) || !URL.canParse(url))
      throw new Error('must be a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL')
    return { kind: 'server', url }
  }
  const [, scheme, rest = ''] = cluster
  const at = rest.lastIndexOf('@')
  const credentials = at === -1 ? undefined : new URL(`redis://${rest.slice(0, at)}@x`)
  const list = (at === -1 ? rest : rest.slice(at + 1)).replace(/\/+$/, '')
  const nodes = list.split(',').map((node) => {
    const parsed = URL.canParse(`redis://${node}`) ? new URL(`redis://${node}`) : undefined
    if (parsed === undefined || parsed.hostname === '' || parsed.pathname !== '' || node.includes('@'))
      throw new Error(`cluster node '${node}' must be host:port`)
    return { host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(parsed.port || 6379) }
  })
  return {
    kind: 'cluster',
    nodes,
    tls: scheme === 'rediss',
    username: credentials?.username ? decodeURIComponent(credentials.username) : undefined,
    password: credentials?.password ? decodeURIComponent(credentials.password) : undefined,
  }
}
