import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js'
import postgres from 'postgres'
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

/** Opens the Postgres pool. Connecting is lazy: an unreachable database surfaces on first use as 503. */
export function openLedger(url: string, options: LedgerOptions = {}): Ledger {
  const sql = postgres(url, {
    max: options.max ?? 20,
    // A dead database must turn into a quick 503, not a request that hangs for the default 30 s.
    connect_timeout: 5,
    idle_timeout: 60,
    onnotice: () => {},
    connection: { application_name: 'hookledger' },
  })
  const db = drizzle({ client: sql, schema })
  return { db, sql, close: () => sql.end({ timeout: 5 }) }
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
