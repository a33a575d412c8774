import { fileURLToPath } from 'node:url'
import { sql } from 'drizzle-orm'
import { readMigrationFiles } from 'drizzle-orm/migrator'
import { drizzle } from 'drizzle-orm/postgres-js'
import postgres from 'postgres'
import type { Logger } from '../logger.js'
import { ledgerTarget, openSingleConnection, pingLedger, postgresErrorCode } from './client.js'

/** Resolved from this file, not the cwd: the CLI may run from any directory. */
export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../migrations', import.meta.url))

// Any constant works as long as every hookledger process uses the same one.
const MIGRATION_LOCK = 727_274_001

/**
 * Applies pending migrations, all in one transaction that first takes a transaction-scoped advisory
 * lock: replicas that start together run them one after another, and the lock needs no session of
 * its own, so it holds behind PgBouncer in transaction mode too (a session lock taken there could be
 * released on another server session, or never). drizzle's own migrator cannot take that lock
 * inside its transaction, so this applies its migration files (same table, same bookkeeping).
 */
export async function migrateLedger(
  url: string,
  logger: Logger,
  /** Another folder of migrations: the upgrade tests stop at an older one. */
  migrationsFolder = MIGRATIONS_FOLDER,
): Promise<void> {
  const target = ledgerTarget(url)
  await ensureDatabaseExists(target.url, logger)
  const connection = openSingleConnection(url)
  try {
    const migrations = readMigrationFiles({ migrationsFolder })
    await drizzle({ client: connection }).transaction(async (tx) => {
      await tx.execute(sql`select pg_advisory_xact_lock(${MIGRATION_LOCK})`)
      await tx.execute(sql`create schema if not exists drizzle`)
      await tx.execute(sql`
        create table if not exists drizzle.__drizzle_migrations (
          id serial primary key, hash text not null, created_at bigint)`)
      const [last] = (await tx.execute(
        sql`select created_at from drizzle.__drizzle_migrations order by created_at desc limit 1`,
      )) as unknown as Array<{ created_at: string }>
      const appliedUpTo = last === undefined ? Number.NEGATIVE_INFINITY : Number(last.created_at)
      for (const migration of migrations) {
        if (migration.folderMillis <= appliedUpTo) continue
        for (const statement of migration.sql) await tx.execute(sql.raw(statement))
        await tx.execute(sql`
          insert into drizzle.__drizzle_migrations (hash, created_at)
          values (${migration.hash}, ${migration.folderMillis})`)
      }
    })
    logger.info('ledger migrations applied')
  } finally {
    await connection.end({ timeout: 5 })
  }
}

/**
 * Creates the database named in the URL when the server has none by that name, so a fresh machine
 * needs no manual `createdb`. Any other connection problem is left for the caller to report.
 */
async function ensureDatabaseExists(url: string, logger: Logger): Promise<void> {
  const probe = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 10 })
  try {
    await pingLedger(probe)
    return
  } catch (error) {
    if (postgresErrorCode(error) !== '3D000') throw error
  } finally {
    await probe.end({ timeout: 5 })
  }
  const target = new URL(url)
  const name = decodeURIComponent(target.pathname.slice(1))
  target.pathname = '/postgres'
  const admin = postgres(target.toString(), { max: 1, onnotice: () => {}, connect_timeout: 10 })
  try {
    await admin.unsafe(`create database "${name.replaceAll('"', '""')}"`)
    logger.warn({ database: name }, 'created the ledger database, which did not exist')
  } catch (error) {
    // Another replica created it between our probe and this statement (42P04 duplicate_database,
    // or 23505 when both CREATEs raced on the catalog's unique index).
    const code = postgresErrorCode(error)
    if (code !== '42P04' && code !== '23505') throw error
  } finally {
    await admin.end({ timeout: 5 })
  }
}

/**
 * When the newest migration applied to this ledger was made (drizzle.__drizzle_migrations'
 * created_at, the journal's `when`); -Infinity when none was applied or the table does not exist.
 */
export async function lastAppliedMigrationAt(client: postgres.Sql): Promise<number> {
  const [table] = await client<Array<{ present: boolean }>>`
    select to_regclass('drizzle.__drizzle_migrations') is not null as present`
  if (!table?.present) return Number.NEGATIVE_INFINITY
  const [row] = await client<Array<{ last: string | null }>>`
    select max(created_at)::text as last from drizzle.__drizzle_migrations`
  return row?.last == null ? Number.NEGATIVE_INFINITY : Number(row.last)
}

/** The deployment id made by the first migration; it names this deployment's queues in Redis. */
export async function readDeploymentId(db: { execute: (query: ReturnType<typeof sql>) => Promise<unknown> }) {
  const rows = (await db.execute(sql`select id from deployment order by created_at limit 1`)) as Array<{
    id: string
  }>
  const id = rows[0]?.id
  if (id === undefined) throw new Error('the ledger has no deployment row: run `hookledger migrate`')
  return id
}
