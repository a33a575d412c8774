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
  /**
   * A connection that owes answers and has heard nothing for this long is closed and made again
   * (ioredis's `socketTimeout`). A Redis that stopped answering, or a network path that lost the flow
   * without a reset (a NAT or firewall that dropped its state, a failover behind a proxy), keeps the
   * socket open: without this its commands would wait for TCP keepalive, over two hours by default.
   */
  silentSocketMs: number
  /** Told at each attempt to make the connection again (not at the first connect). */
  onReconnect?: OnReconnect | undefined
}

/** Where a process counts its connections made again (`hookledger_redis_reconnects_total`). */
export type OnReconnect = () => void

/**
 * How long a connection that owes Redis's answers may hear nothing before it is made again. Redis
 * answers a command in microseconds, and a script of BullMQ's in milliseconds; five seconds of
 * silence means the answer is not coming. A command sent on the closed connection fails (the
 * producer's, the guard's) or is sent again on the new one (the workers').
 */
const SILENT_SOCKET_MS = 5000

/**
 * A worker's connections wait on blocking commands: BullMQ's BZPOPMIN blocks for up to 10 s (its
 * own watchdog gives up on it a second later), an answer that is late by design.
 */
const BLOCKING_SILENT_SOCKET_MS = 10_000 + 1000 + SILENT_SOCKET_MS

/** The one place a Redis connection is made: opened, and its reconnects counted when asked. */
function connect(url: string, settings: ConnectionSettings): RedisConnection {
  const connection = open(url, settings)
  const { onReconnect } = settings
  if (onReconnect !== undefined) countReconnects(connection, onReconnect)
  return connection
}

/**
 * Wraps the connection's reconnect strategy, whatever it is (ioredis's default, or a bounded one), so
 * that each attempt that goes ahead is told. It is the option, not a listener: BullMQ's worker makes
 * its blocking connection as a duplicate of the one it is given, with its options and no listeners.
 * A cluster client reconnects as a whole only once it lost every node; a node it drops and makes
 * again from the slot map (a master gone silent, a failover) is not counted.
 */
function countReconnects(connection: RedisConnection, onReconnect: OnReconnect): void {
  const counted =
    <A extends unknown[], R>(strategy: (...args: A) => R) =>
    (...args: A): R => {
      const delayMs = strategy(...args)
      if (typeof delayMs === 'number') onReconnect()
      return delayMs
    }
  // None: the connection never reconnects, and there is nothing to count.
  if (connection instanceof Cluster) {
    const strategy = connection.options.clusterRetryStrategy
    if (strategy) connection.options.clusterRetryStrategy = counted(strategy)
  } else {
    const strategy = connection.options.retryStrategy
    if (strategy) connection.options.retryStrategy = counted(strategy)
  }
}

/**
 * On a cluster the per-command settings go to each node's connection (`redisOptions`, where BullMQ
 * also looks for `maxRetriesPerRequest`), and the offline queue and reconnects to the cluster client,
 * which owns them: its node connections never reconnect on their own, it rebuilds them from the
 * cluster's slot map.
 */
function open(url: string, settings: ConnectionSettings): RedisConnection {
  const target = parseRedisUrl(url)
  const { reconnectAttempts } = settings
  const giveUp =
    reconnectAttempts === undefined ? undefined : (times: number) => (times > reconnectAttempts ? null : 200)
  const perCommand: RedisOptions = {
    maxRetriesPerRequest: settings.maxRetriesPerRequest,
    connectTimeout: settings.connectTimeout,
    socketTimeout: settings.silentSocketMs,
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
export function producerConnection(url: string, onReconnect?: OnReconnect): RedisConnection {
  return connect(url, {
    onReconnect,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    silentSocketMs: SILENT_SOCKET_MS,
  })
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
export function guardConnection(url: string, onReconnect?: OnReconnect): RedisConnection {
  return connect(url, {
    onReconnect,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    autoPipelining: true,
    commandTimeout: GUARD_COMMAND_TIMEOUT_MS,
    silentSocketMs: SILENT_SOCKET_MS,
  })
}

export const GUARD_COMMAND_TIMEOUT_MS = 1000

/** For workers and the relay: waits for Redis as long as it takes (BullMQ requires null retries). */
export function consumerConnection(url: string, onReconnect?: OnReconnect): RedisConnection {
  return connect(url, {
    onReconnect,
    maxRetriesPerRequest: null,
    enableOfflineQueue: true,
    connectTimeout: 5000,
    silentSocketMs: BLOCKING_SILENT_SOCKET_MS,
  })
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
    silentSocketMs: SILENT_SOCKET_MS,
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
