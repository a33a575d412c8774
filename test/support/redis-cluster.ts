import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import { freePort } from './child.js'

const run = promisify(execFile)

export interface ClusterNode {
  port: number
  process: ChildProcess
}

export interface RedisCluster {
  /** REDIS_URL for hookledger: `redis+cluster://` and every node. */
  url: string
  nodes: ClusterNode[]
  /** The ports of the nodes that serve slots now (after a failover, a promoted replica's). */
  masterPorts(): Promise<number[]>
  /** A connection to one node of the test's (not a cluster client): for INFO, FLUSHALL, KEYS. */
  node(port: number): Redis
  /** SIGKILLs one node, as a crashed machine; the cluster promotes its replica, if it has one. */
  kill(port: number): Promise<void>
  /**
   * SIGSTOPs one node, as a machine gone silent: its sockets stay open and nothing is answered on
   * them, no reset, no error. The cluster fails it after the node timeout and promotes its replica.
   */
  freeze(port: number): void
  /**
   * SIGCONTs a frozen node and waits until it serves again: a master that was failed over in the
   * meantime rejoins as a replica of the node that took its slots, synced with it.
   */
  thaw(port: number): Promise<void>
  /**
   * Waits until every live node says `cluster_state:ok` and serves every slot from a live master: a
   * killed master counts as failed only after the node timeout, and until then the others still
   * report the cluster ok.
   */
  waitHealthy(timeoutMs?: number): Promise<void>
  stop(): Promise<void>
}

/**
 * A Redis Cluster of the test's own on loopback: three masters, each with a replica when `replicas`
 * is set, made with `redis-cli --cluster create` as an operator would. Failover is quick (a node is
 * failed after `nodeTimeoutMs` without an answer) so a test can wait for it.
 */
export async function startRedisCluster(
  options: { replicas?: boolean; nodeTimeoutMs?: number } = {},
): Promise<RedisCluster> {
  const count = options.replicas === true ? 6 : 3
  const directory = mkdtempSync(join(tmpdir(), 'hookledger-redis-cluster-'))
  const nodes: ClusterNode[] = []
  const connections = new Map<number, Redis>()
  const node = (port: number) => {
    let connection = connections.get(port)
    if (connection === undefined) {
      connection = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, lazyConnect: true })
      connection.on('error', () => {})
      connections.set(port, connection)
    }
    return connection
  }
  const running = () => nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null)
  // Frozen nodes answer nothing: whatever asks the live nodes would wait on them forever.
  const frozen = new Set<number>()
  const live = () => running().filter((n) => !frozen.has(n.port))
  const nodeOn = (port: number) => {
    const found = nodes.find((n) => n.port === port)
    if (found === undefined) throw new Error(`no cluster node on ${port}`)
    return found
  }
  const forget = (port: number) => {
    connections.get(port)?.disconnect()
    connections.delete(port)
  }
  const stop = async () => {
    for (const connection of connections.values()) connection.disconnect()
    await Promise.all(
      running().map(
        (n) =>
          new Promise((resolve) => {
            n.process.once('exit', resolve)
            n.process.kill('SIGKILL')
          }),
      ),
    )
    rmSync(directory, { recursive: true, force: true })
  }
  try {
    // A port freePort found free is bound a moment later by redis-server: another run on the machine
    // may take it in between, and that node then exits at once. It is started again on fresh ports.
    for (let index = 0; index < count; index += 1) {
      for (let attempt = 1; ; attempt += 1) {
        const port = await freePort()
        // The bus port is named: the default, port + 10000, can fall in the kernel's ephemeral range.
        const busPort = await freePort()
        const process = spawn(
          'redis-server',
          [
            '--port',
            String(port),
            '--cluster-port',
            String(busPort),
            '--bind',
            '127.0.0.1',
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            join(directory, `nodes-${port}.conf`),
            '--cluster-node-timeout',
            String(options.nodeTimeoutMs ?? 2000),
            // A replica takes over however long ago it last heard its master.
            '--cluster-replica-validity-factor',
            '0',
            '--dir',
            directory,
            '--save',
            '',
            '--appendonly',
            'no',
            '--maxmemory-policy',
            'noeviction',
          ],
          { stdio: 'ignore' },
        )
        const started = { port, process }
        nodes.push(started)
        if (await answersPing(node(port), port, process)) break
        nodes.splice(nodes.indexOf(started), 1)
        if (attempt === 3) throw new Error(`redis-server exited at start ${attempt} times (last on ${port})`)
      }
    }
    const replicaArgs = options.replicas === true ? ['--cluster-replicas', '1'] : []
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map(({ port }) => `127.0.0.1:${port}`),
        ...replicaArgs,
        '--cluster-yes',
      ],
      { timeout: 30_000 },
    )
  } catch (error) {
    await stop()
    throw error
  }

  const cluster: RedisCluster = {
    url: `redis+cluster://${nodes.map(({ port }) => `127.0.0.1:${port}`).join(',')}`,
    nodes,
    async masterPorts() {
      for (const { port } of live()) {
        try {
          const text = String(await node(port).call('CLUSTER', 'NODES'))
          return text
            .split('\n')
            .map((line) => line.split(' '))
            .filter(
              (fields) =>
                fields[2]?.split(',').includes('master') === true &&
                !fields[2].includes('fail') &&
                fields.length > 8,
            )
            .map((fields) => Number(fields[1]?.split(':')[1]?.split('@')[0]))
        } catch {
          // the next node answers
        }
      }
      throw new Error('no cluster node answers')
    },
    node,
    async kill(port) {
      const target = nodeOn(port)
      const exited = new Promise((resolve) => target.process.once('exit', resolve))
      target.process.kill('SIGKILL')
      await exited
      forget(port)
    },
    freeze(port) {
      nodeOn(port).process.kill('SIGSTOP')
      frozen.add(port)
      forget(port)
    },
    async thaw(port) {
      nodeOn(port).process.kill('SIGCONT')
      frozen.delete(port)
      await waitForReplicas(cluster, [port])
    },
    async waitHealthy(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const states = await Promise.all(
          live().map(async ({ port }) => {
            try {
              const info = String(await node(port).call('CLUSTER', 'INFO'))
              const slots = (await node(port).call('CLUSTER', 'SLOTS')) as Array<
                [number, number, [string, number]]
              >
              const livePorts = new Set(live().map((n) => n.port))
              return (
                /cluster_state:ok/.test(info) &&
                /cluster_slots_ok:16384/.test(info) &&
                slots.every((range) => livePorts.has(range[2][1]))
              )
            } catch {
              return false
            }
          }),
        )
        if (states.every(Boolean)) return
        if (Date.now() > deadline) throw new Error(`Redis Cluster not healthy within ${timeoutMs} ms`)
        await new Promise((resolve) => setTimeout(resolve, 200))
      }
    },
    stop,
  }
  try {
    await cluster.waitHealthy()
    if (options.replicas === true)
      await waitForReplicas(
        cluster,
        nodes.map(({ port }) => port),
      )
  } catch (error) {
    await stop()
    throw error
  }
  return cluster
}

/** True once the node answers PING; false when its process exited first (its ports were taken). */
async function answersPing(redis: Redis, port: number, process: ChildProcess): Promise<boolean> {
  const deadline = Date.now() + 10_000
  for (;;) {
    try {
      await redis.ping()
      return true
    } catch {
      if (process.exitCode !== null || process.signalCode !== null) return false
      if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not start`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
}

/**
 * Every replica among `ports` has synced with its master: only then can it take over with the
 * master's data. The masters among them have nothing to wait for.
 */
async function waitForReplicas(cluster: RedisCluster, ports: readonly number[]) {
  const masters = new Set(await cluster.masterPorts())
  const replicas = ports.filter((port) => !masters.has(port))
  const deadline = Date.now() + 30_000
  for (;;) {
    const synced = await Promise.all(
      replicas.map(async (port) =>
        /master_link_status:up/.test(
          await cluster
            .node(port)
            .info('replication')
            .catch(() => ''),
        ),
      ),
    )
    if (synced.every(Boolean)) return
    if (Date.now() > deadline) throw new Error(`Redis Cluster replicas ${replicas} did not sync within 30 s`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}
