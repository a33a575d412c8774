import { Cluster, Redis, type RedisOptions } from 'ioredis'
import { parseRedisUrl } from '../config/redis-url.js'

/** A connection to the queue's Redis: one server, or a Redis Cluster (REDIS_URL `redis+cluster://…`). */
export type RedisConnection = Redis | Cluster

interface ConnectionSettings {
  /** Retries of one command across reconnects; null waits as long as it takes (BullMQ's workers). */
  maxRetriesPerRequest: number | null
  /** False: a command sent while disconnected fails at once instead of waiting for the connection. */
  enableOfflineQueue: boolean
  connectTimeout: number
  /** Reconnects before the connection gives up for good; unset, it never does. */
  reconnectAttempts?: number
  /** ioredis's auto-pipelining: the commands of one event-loop turn go out in one write. */
  autoPipelining?: boolean
  /** A command unanswered this long fails (a Redis that stopped answering keeps its connection open). */
  commandTimeout?: number
}

/**
 * The one place a Redis connection is made. On a cluster the per-command settings go to each node's
 * connection (`redisOptions`, where BullMQ also looks for `maxRetriesPerRequest`), and the offline
 * queue and reconnects to the cluster client, which owns them: its node connections never
 * reconnect on their own, it rebuilds them from the cluster's slot map.
 */
function connect(url: string, settings: ConnectionSettings): RedisConnection {
  const target = parseRedisUrl(url)
  const { reconnectAttempts } = settings
  const giveUp =
    reconnectAttempts === undefined ? undefined : (times: number) => (times > reconnectAttempts ? null : 200)
  const perCommand: RedisOptions = {
    maxRetriesPerRequest: settings.maxRetriesPerRequest,
    connectTimeout: settings.connectTimeout,
    ...(settings.commandTimeout === undefined ? {} : { commandTimeout: settings.commandTimeout }),
  }
  const pipelining = settings.autoPipelining === true ? { enableAutoPipelining: true } : {}
  if (target.kind === 'server') {
    return new Redis(url, {
      ...perCommand,
      ...pipelining,
      enableOfflineQueue: settings.enableOfflineQueue,
      ...(giveUp === undefined ? {} : { retryStrategy: giveUp }),
    })
  }
  return new Cluster(target.nodes, {
    ...pipelining,
    enableOfflineQueue: settings.enableOfflineQueue,
    // The cluster client resolves a node's host name before it connects, and a TLS certificate names
    // the host, not its address: without this each handshake fails (ioredis's note on ElastiCache).
    ...(target.tls
      ? { dnsLookup: (address: string, done: (error: null, address: string) => void) => done(null, address) }
      : {}),
    ...(giveUp === undefined ? {} : { clusterRetryStrategy: giveUp }),
    redisOptions: {
      ...perCommand,
      ...(target.username === undefined ? {} : { username: target.username }),
      ...(target.password === undefined ? {} : { password: target.password }),
      ...(target.tls ? { tls: {} } : {}),
    },
  })
}

/**
 * For the HTTP path: fails fast and queues nothing while disconnected, so a dead Redis can never
 * delay or fail a 200 that the ledger commit already earned. The relay enqueues what it missed.
 */
export function producerConnection(url: string): RedisConnection {
  return connect(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 2000 })
}

/**
 * For the destination guard (src/delivery/redis-guard.ts): fails fast as the producer's does, and
 * pipelines on its own. Every delivery asks the guard before it goes out and tells it how it ended,
 * each a command of its own, and each command was a write system call: a draining worker's writes to
 * this connection were ~60 µs of its CPU per delivery. With auto-pipelining the commands of all the
 * deliveries of one event-loop turn go out in one write. It is the guard's connection alone: BullMQ's
 * blocking commands must not wait in a pipeline behind others. A guard command takes microseconds:
 * one unanswered for a second means Redis stopped answering, and the delivery waits (as when Redis
 * is down) instead of holding its worker slot until the connection is given up.
 */
export function guardConnection(url: string): RedisConnection {
  return connect(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    autoPipelining: true,
    commandTimeout: GUARD_COMMAND_TIMEOUT_MS,
  })
}

export const GUARD_COMMAND_TIMEOUT_MS = 1000

/** For workers and the relay: waits for Redis as long as it takes (BullMQ requires null retries). */
export function consumerConnection(url: string): RedisConnection {
  return connect(url, { maxRetriesPerRequest: null, enableOfflineQueue: true, connectTimeout: 5000 })
}

/**
 * For one short conversation (a check at start, `hookledger doctor`): a few quick reconnects, then
 * the command fails and says why, rather than the tool hanging on a Redis that is gone.
 */
export function briefConnection(url: string): RedisConnection {
  return connect(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    connectTimeout: 2000,
    reconnectAttempts: 2,
  })
}

/** Whether REDIS_URL names a Redis Cluster. */
export function isClusterUrl(url: string): boolean {
  return parseRedisUrl(url).kind === 'cluster'
}

/**
 * The servers whose memory holds data: every master of a cluster (each keeps its own slots, has its
 * own maxmemory-policy and evicts on its own), or the one server. The cluster's own client would send
 * a keyless command such as INFO to one node picked at random.
 */
export async function dataServers(redis: RedisConnection): Promise<Redis[]> {
  if (!(redis instanceof Cluster)) return [redis]
  if (redis.status !== 'ready') await redis.ping() // the node list comes with the first slot map
  return redis.nodes('master')
}
