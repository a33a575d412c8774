import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js'
import postgres from 'postgres'
import { ConfigError } from '../config/errors.js'
import * as schema from './schema.js'

// `$client`: the pool itself, for the hot-path statements written in SQL (src/db/claims.ts, operations.ts).
export type Database = PostgresJsDatabase<typeof schema> & { $client: postgres.Sql }
/** The transaction a handler receives; whatever it writes commits together with the DONE mark. */
export type Transaction = Parameters<Parameters<Database['transaction']>[0]>[0]

export interface Ledger {
  db: Database
  sql: postgres.Sql
  close(): Promise<void>
}

export interface LedgerOptions {
  /** Pool size: the worker holds one connection per running handler, plus the api's claims. */
  max?: number
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

/** Opens the Postgres pool. Connecting is lazy: an unreachable database surfaces on first use as 503. */
export function openLedger(url: string, options: LedgerOptions = {}): Ledger {
  const sql = postgres(url, {
    max: options.max ?? 20,
    // A dead database must turn into a quick 503, not a request that hangs for the default 30 s.
    connect_timeout: 5,
    idle_timeout: 60,
    backoff: reconnectDelaySeconds,
    onnotice: () => {},
    connection: { application_name: 'hookledger' },
  })
  const db = drizzle({ client: sql, schema })
  return { db, sql, close: () => sql.end({ timeout: 5 }) }
}

/**
 * The driver counts connection errors across the whole pool and waits up to 20 s (3^n / 100 s)
 * before reconnecting; after one reset of a pool of 14, a query handed to a reconnecting connection
 * waited 10-20 s. A reset is cut short here: at most 1 s, with jitter so the pool does not reconnect
 * in step.
 */
function reconnectDelaySeconds(failures: number): number {
  return Math.min(0.05 * 2 ** failures, 1) * (0.5 + Math.random() / 2)
}

/** Walks a driver error's `cause` chain (drizzle wraps postgres errors) for a Postgres error code. */
export function postgresErrorCode(error: unknown): string | undefined {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string') return code
  }
  return undefined
}

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
])

/** True when the error means the ledger cannot be reached (so the answer is 503, and a retry may work). */
export function isLedgerUnavailable(error: unknown): boolean {
  const code = postgresErrorCode(error)
  return code !== undefined && CONNECTION_ERROR_CODES.has(code)
}
