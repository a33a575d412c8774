import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js'
import postgres from 'postgres'
import { backoffDelay, withJitter } from '../backoff.js'
import { ConfigError } from '../config/errors.js'
import { DeadlineError, withDeadline } from '../deadline.js'
import * as schema from './schema.js'

// `$client`: the pool itself, for the hot-path statements written in SQL (src/db/claims.ts, operations.ts).
// `$genericPlans`: the connections for the worker's batched statements (see openLedger).
export type Database = PostgresJsDatabase<typeof schema> & {
  $client: postgres.Sql
  $genericPlans: postgres.Sql
}
/** The transaction a handler receives; whatever it writes commits together with the DONE mark. */
export type Transaction = Parameters<Parameters<Database['transaction']>[0]>[0]

/** The pool as one part of the process uses it: its statements under that part's deadline. */
export interface LedgerView {
  db: Database
  sql: postgres.Sql
  /**
   * For the worker's batched statements (the lease, the settle, the fresh claim of an operation,
   * the enqueue marks): connections on which each statement keeps one generic plan. The pool itself
   * behind PgBouncer, which refuses the setting (see openLedger).
   */
  genericPlans: postgres.Sql
}

export interface Ledger extends LedgerView {
  /** The same pool, each statement (transactions' too) failing after `timeoutMs` without an answer. */
  scoped(timeoutMs: number): LedgerView
  close(): Promise<void>
}

export interface LedgerOptions {
  /** Pool size: the worker holds one connection per running handler, plus the api's claims. */
  max?: number
  /** The deadline of statements no scope sets (start-up checks, the CLI); the longest the server lets one run. */
  statementTimeoutMs?: number
  /** A session idle in a transaction this long is ended by the server (its locks with it). */
  idleInTransactionMs?: number
  /** The server's keepalive on this pool's sessions (SERVER_KEEPALIVE unless a test shortens it). */
  serverKeepalive?: typeof SERVER_KEEPALIVE
  /**
   * False: `genericPlans` is the pool, as behind PgBouncer (the service's choice for a ledger of
   * more than GENERIC_PLAN_MAX_PERIODS periods: usesGenericPlans). Default true.
   */
  genericPlans?: boolean
}

/** For the CLI and start-up: a statement alone, never a handler's. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000
/** A transaction waits at most for its handler (30 s by default) between two statements. */
export const DEFAULT_IDLE_IN_TRANSACTION_MS = 40_000
/**
 * TCP keepalive after this many idle seconds; Node's libuv then probes every second, 10 times. An
 * idle connection whose host is gone is closed ~15 s later instead of failing the next statement.
 */
const KEEP_ALIVE_SECONDS = 5
/**
 * The server's side of the same: PostgreSQL probes a session idle this many seconds, every
 * `interval`, `count` times, then ends it; and one whose data goes unacknowledged that long in all
 * (`tcp_user_timeout`: an answer sent into the silence, which keepalive never probes) is ended too. A
 * session whose client vanished behind a silent path (a NAT or firewall that dropped the flow:
 * neither a reset nor a FIN reaches the server) otherwise keeps its connection slot until the
 * server's default keepalive gives up, over two hours (or ~15 minutes of retransmissions), while
 * the pools open new connections beside it: after one such outage a deployment holds twice its
 * budget, and the next reconnect meets max_connections ("sorry, too many clients already").
 */
export const SERVER_KEEPALIVE = { idleSeconds: 10, intervalSeconds: 5, count: 3 }

/** How long the server waits on a silent client, idle or not: 25 s with SERVER_KEEPALIVE. */
export function serverGivesUpAfterMs(keepalive: typeof SERVER_KEEPALIVE): number {
  return (keepalive.idleSeconds + keepalive.intervalSeconds * keepalive.count) * 1000
}

/** Connections the api's claims, the admin pages and the agents' API share (claims are batched). */
const API_CONNECTIONS = 10
/**
 * Beyond one connection per running handler (its transaction): the outbound ledger a handler calls,
 * the reconciler, the relay, retention and the gauges, each briefly.
 */
const WORKER_SPARE_CONNECTIONS = 4
const API_CONNECTIONS_BESIDE_WORKER = 4
/** Fewer than this and every handler can hold a transaction while waiting for the connection it needs next. */
const WORKER_MIN_SPARE_CONNECTIONS = 2
/**
 * The connections of `genericPlans`, beside the pool. Its statements are few at a time (each carries
 * a batch); one that finds all four busy waits for the first to free (the patched driver never
 * queues it behind a statement that may be waiting on a lock: test/faults/postgres-lock-wait.test.ts).
 */
const GENERIC_PLAN_CONNECTIONS = 4

/**
 * The most ledger periods for which the worker's statements keep generic plans. PostgreSQL 15 locks
 * every partition a generic plan names before it prunes, and making the plan opens every partition
 * with its indexes. Measured on a ledger of P periods (bench/generic-plan-locks.ts): a lease locks
 * 12 + 4·P relations each run and 11 + 21·P when a connection first plans it (the settle 16 + P, the
 * enqueue mark 3 + P). The lock table is shared by every backend (max_locks_per_transaction × about
 * max_connections entries): 96 connections planning the lease at once filled it at 62 periods ("out
 * of shared memory", which fails any backend's next lock, an api's claim too) and did not at 37.
 * Above this bound the pool's custom plans lock only the periods a batch touches, at the planning
 * cost that generic plans save.
 */
export const GENERIC_PLAN_MAX_PERIODS = 40

/**
 * Connections a process holds beside `database.poolSize`: its generic-plan connections, none behind
 * PgBouncer or when its ledger keeps too many periods for them (`genericPlans` false).
 */
export function connectionsBesidePool(url: string, genericPlans: boolean): number {
  return ledgerTarget(url).pgbouncer || !genericPlans ? 0 : GENERIC_PLAN_CONNECTIONS
}

/** A connection of its own, for a step before or beside the pools: migrations, reads at start. */
export function openSingleConnection(url: string): postgres.Sql {
  const target = ledgerTarget(url)
  return postgres(target.url, { max: 1, onnotice: () => {}, connect_timeout: 10, prepare: !target.pgbouncer })
}

/**
 * The pool size of one process: `database.poolSize` when set, else what its roles need. Refuses a
 * size that can deadlock the worker, so a budget mistake fails at start, not under load.
 */
export function ledgerPoolSize(options: {
  configured: number | undefined
  runsApi: boolean
  runsWorker: boolean
  workerConcurrency: number
}): number {
  const { configured, runsApi, runsWorker, workerConcurrency } = options
  const minimum = runsWorker ? workerConcurrency + WORKER_MIN_SPARE_CONNECTIONS : 2
  if (configured !== undefined && configured < minimum) {
    throw new ConfigError(
      `invalid config:\n  - database.poolSize: must be at least worker.concurrency + ${WORKER_MIN_SPARE_CONNECTIONS} ` +
        `(${minimum}) for a process that runs the worker: each running handler holds a connection for its transaction`,
    )
  }
  if (configured !== undefined) return configured
  if (!runsWorker) return API_CONNECTIONS
  const worker = workerConcurrency + WORKER_SPARE_CONNECTIONS
  // One process that receives too: its claims are batched, so a few more connections serve them.
  return runsApi ? worker + API_CONNECTIONS_BESIDE_WORKER : worker
}

/**
 * What one process of a role may hold at most: its pool (ledgerPoolSize) and the connections beside
 * it (`besidePool`, from connectionsBesidePool). The connection budget (doctor) and the soak's
 * sessions check count by it.
 */
export function processConnections(options: {
  role: 'all' | 'api' | 'worker'
  configured: number | undefined
  workerConcurrency: number
  besidePool: number
}): number {
  const { role, configured, workerConcurrency, besidePool } = options
  const pool = ledgerPoolSize({
    configured,
    runsApi: role !== 'worker',
    runsWorker: role !== 'api',
    workerConcurrency,
  })
  return pool + besidePool
}

/**
 * Opens the Postgres pool. Connecting is lazy: an unreachable database surfaces on first use as 503.
 *
 * Every statement has a deadline on this side (the patched driver's `query_timeout`, per scope
 * through `scoped()`): a statement with no answer by then fails with STATEMENT_TIMEOUT and its
 * connection is dropped, since a path that went silent (a vanished host, a NAT that lost its state:
 * no reset, no FIN) otherwise keeps it waiting for the kernel's retransmissions, ~15 minutes. The
 * server's own `statement_timeout` cannot do that (it never got the statement); it is set to the
 * longest deadline so that nothing the client gave up on runs on after it. And a session left idle
 * in a transaction (its client gone silent with row locks held) is ended by the server.
 *
 * Behind PgBouncer in transaction mode (`?pgbouncer=true`, see `ledgerTarget`) a session is lent
 * for one transaction only: no named prepared statements, and the two server deadlines are set at
 * the start of each transaction (`set_config(…, true)`, sent in the same round trip as its first
 * statement) with that scope's deadline instead of once per session.
 *
 * Beside the pool, a few connections (`genericPlans`) run each statement on its generic plan
 * (`plan_cache_mode=force_generic_plan`, sent when connecting, so it costs no round trip): the
 * worker's batched statements. On a ledger whose periods hold a history the planner prices a
 * custom plan pruned to the batch's period below the generic plan over every period, and so plans
 * the lease, the settle and the enqueue mark again at every call (with 2,000,000 events of history,
 * their planning went from 42 to 163 µs per forwarded event for the lease, 18 to 64 for the settle,
 * 20 to 73 for the enqueue mark: `COST_HISTORY=2000000 npx tsx bench/per-event-cost.ts`). Pruning
 * still happens, as each statement starts. The setting is not the pool's: its other statements (the
 * admin's searches, the relay's and retention's scans) need plans made for their values. Behind
 * PgBouncer there is no such connection (it refuses a setting it does not track in the startup
 * packet, and unnamed statements are planned at every call anyway): `genericPlans` is the pool. So it
 * is with `genericPlans: false`, for a ledger of more periods than GENERIC_PLAN_MAX_PERIODS.
 */
export function openLedger(url: string, options: LedgerOptions = {}): Ledger {
  const statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS
  const idleInTransactionMs = options.idleInTransactionMs ?? DEFAULT_IDLE_IN_TRANSACTION_MS
  const target = ledgerTarget(url)
  const keepalive = options.serverKeepalive ?? SERVER_KEEPALIVE
  // Sent in the startup packet: each session has them from its first statement, at no round trip.
  const sessionSettings = {
    statement_timeout: statementTimeoutMs,
    idle_in_transaction_session_timeout: idleInTransactionMs,
    tcp_keepalives_idle: keepalive.idleSeconds,
    tcp_keepalives_interval: keepalive.intervalSeconds,
    tcp_keepalives_count: keepalive.count,
    tcp_user_timeout: serverGivesUpAfterMs(keepalive),
  }
  const open = (max: number, name: string, settings: Record<string, string | number>) =>
    postgres(target.url, {
      max,
      // A dead database must turn into a quick 503, not a request that hangs for the default 30 s.
      connect_timeout: 5,
      idle_timeout: 60,
      keep_alive: KEEP_ALIVE_SECONDS,
      query_timeout: statementTimeoutMs / 1000,
      backoff: reconnectDelaySeconds,
      onnotice: () => {},
      prepare: !target.pgbouncer,
      // PgBouncer refuses a startup packet carrying settings it does not track (statement_timeout);
      // its own keepalive settings (tcp_keepidle, tcp_keepintvl, tcp_keepcnt) cover the sessions it holds.
      connection: { application_name: name, ...(target.pgbouncer ? {} : settings) },
    })
  const sql = open(options.max ?? 20, 'hookledger', sessionSettings)
  const generic =
    connectionsBesidePool(url, options.genericPlans ?? true) === 0
      ? sql
      : open(GENERIC_PLAN_CONNECTIONS, 'hookledger generic plans', {
          ...sessionSettings,
          plan_cache_mode: 'force_generic_plan',
        })
  const perTransaction = (pool: postgres.Sql, timeoutMs: number) =>
    target.pgbouncer ? withDeadlinesPerTransaction(pool, timeoutMs, idleInTransactionMs) : pool
  const view = (timeoutMs: number, scope: (pool: postgres.Sql) => postgres.Sql): LedgerView => {
    const client = perTransaction(scope(sql), timeoutMs)
    const genericPlans = generic === sql ? client : scope(generic)
    const db = Object.assign(drizzle({ client, schema }), { $genericPlans: genericPlans })
    return { db, sql: client, genericPlans }
  }
  return {
    ...view(statementTimeoutMs, (pool) => pool),
    scoped: (timeoutMs) => view(timeoutMs, (pool) => pool.timeout(timeoutMs / 1000)),
    async close() {
      await Promise.all([sql.end({ timeout: 5 }), generic === sql ? undefined : generic.end({ timeout: 5 })])
    },
  }
}

/** Where the ledger is: the URL the driver gets, and whether PgBouncer lends its sessions per transaction. */
export interface LedgerTarget {
  url: string
  pgbouncer: boolean
}

const PGBOUNCER_PARAMETER = /([?&])pgbouncer=(true|false)(&|$)/

/**
 * Reads and removes `pgbouncer=true|false` from a database URL's query (left in, the driver would
 * send it to the server as a setting). A string edit, not `new URL`: the driver's URLs may name
 * several hosts, which `URL` rejects.
 */
export function ledgerTarget(url: string): LedgerTarget {
  const match = PGBOUNCER_PARAMETER.exec(url)
  if (match === null) return { url, pgbouncer: false }
  const [whole, before, value, after] = match
  const rest =
    url.slice(0, match.index) + (after === '&' ? before : '') + url.slice(match.index + whole.length)
  return { url: rest, pgbouncer: value === 'true' }
}

const deadlinedPerTransaction = new WeakSet<postgres.Sql>()

/**
 * Whether the server's deadlines hold for a statement `pool` runs outside a transaction. Behind
 * PgBouncer they are set per transaction only (withDeadlinesPerTransaction): a statement that
 * commits alone runs with no server `statement_timeout`, and can go on, and commit, long after
 * the client gave up on it.
 */
export function serverDeadlinesOutsideTransactions(pool: postgres.Sql): boolean {
  return !deadlinedPerTransaction.has(pool)
}

/**
 * The pool with every transaction opening by setting its own `statement_timeout` and
 * `idle_in_transaction_session_timeout` (local to the transaction, so nothing outlives it on a
 * session PgBouncer lends to another client next). The setting is not awaited: it goes out ahead of
 * the transaction's first statement, and a failure fails the transaction like any statement's.
 */
function withDeadlinesPerTransaction(pool: postgres.Sql, statementMs: number, idleMs: number): postgres.Sql {
  deadlinedPerTransaction.add(pool)
  const begin = pool.begin
  const opening = (tx: postgres.TransactionSql) =>
    void tx`select set_config('statement_timeout', ${String(statementMs)}, true),
                   set_config('idle_in_transaction_session_timeout', ${String(idleMs)}, true)`.execute()
  const deadlined = (
    mode: string | ((tx: postgres.TransactionSql) => unknown),
    fn?: (tx: postgres.TransactionSql) => unknown,
  ) => {
    const [options, body] =
      typeof mode === 'function' ? ['', mode] : [mode, fn as (tx: postgres.TransactionSql) => unknown]
    return begin(options, (tx) => {
      opening(tx)
      return body(tx)
    })
  }
  return Object.assign(pool, { begin: deadlined as postgres.Sql['begin'] })
}

/** One round trip: resolves when the ledger answers, throws the driver's error when it does not. */
export async function pingLedger(client: postgres.Sql): Promise<void> {
  await client`select 1`
}

/**
 * The same round trip for a process that writes (readiness): false when the ledger's transactions
 * are read-only (a standby, or default_transaction_read_only), as none of its work could be written.
 */
export async function ledgerTakesWrites(client: postgres.Sql): Promise<boolean> {
  const [row] = await client<
    { readOnly: string }[]
  >`select current_setting('transaction_read_only') as "readOnly"`
  return row?.readOnly !== 'on'
}

/** One view of the pool per part of the process, each with that part's statement deadline. */
export function scopeLedger<S extends string>(
  ledger: Ledger,
  timeoutsMs: Readonly<Record<S, number>>,
): Record<S, LedgerView> {
  return Object.fromEntries(
    Object.entries<number>(timeoutsMs).map(([scope, ms]) => [scope, ledger.scoped(ms)]),
  ) as Record<S, LedgerView>
}

const RECONNECT_BACKOFF = { baseDelayMs: 50, maxDelayMs: 1000 }

/**
 * The driver counts connection errors across the whole pool and waits up to 20 s (3^n / 100 s)
 * before reconnecting; after one reset of a pool of 14, a query handed to a reconnecting connection
 * waited 10-20 s. A reset is cut short here: at most 1 s, with jitter so the pool does not reconnect
 * in step.
 */
function reconnectDelaySeconds(failures: number): number {
  // `failures` counts the pool's errors since its last good connection (0 after a clean close):
  // 50 ms · 2^failures, at most 1 s.
  return withJitter(backoffDelay(RECONNECT_BACKOFF, failures + 1)) / 1000
}

/** Walks a driver error's `cause` chain (drizzle wraps postgres errors) for a Postgres error code. */
export function postgresErrorCode(error: unknown): string | undefined {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string') return code
  }
  return undefined
}

/**
 * read_only_sql_transaction: the server answers but refuses every write, a standby reached after a
 * failover (stale DNS, a virtual IP that moved late) or a database made read-only. It lasts until
 * the server is writable, and a session opened meanwhile stays read-only for good: the patched
 * driver ends a connection after such an answer, so the pool's next one can reach a writable server.
 */
const READ_ONLY_CODE = '25006'

const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'STATEMENT_TIMEOUT', // no answer within the statement's deadline (patched driver): the path is silent
  '57014', // query_canceled: the server's statement_timeout
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '53300', // too_many_connections
  '3D000', // invalid_catalog_name: the database does not exist
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  // PgBouncer's own errors: its server connection died ("server conn crashed?"), logging in to the
  // server is failing, or a client waited past query_wait_timeout.
  '08P01',
  READ_ONLY_CODE,
])

/**
 * `promise`, or after `ms` a STATEMENT_TIMEOUT error (a lost ledger, like a statement past its own
 * deadline): for work that may also wait for a connection. The losing promise keeps running.
 */
export async function withLedgerDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  try {
    return await withDeadline(promise, ms, `the ledger did not answer within ${ms} ms`)
  } catch (error) {
    if (error instanceof DeadlineError) throw Object.assign(error, { code: 'STATEMENT_TIMEOUT' })
    throw error
  }
}

/** True when the error means the ledger cannot be reached (so the answer is 503, and a retry may work). */
export function isLedgerUnavailable(error: unknown): boolean {
  const code = postgresErrorCode(error)
  return code !== undefined && CONNECTION_ERROR_CODES.has(code)
}

/** True when the ledger answered but refuses writes (one kind of unavailable: see READ_ONLY_CODE). */
export function isLedgerReadOnly(error: unknown): boolean {
  return postgresErrorCode(error) === READ_ONLY_CODE
}
