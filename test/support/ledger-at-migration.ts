import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { afterAll, beforeAll } from 'vitest'
import { migrateLedger } from '../../src/db/migrate.js'
import { createLogger } from '../../src/logger.js'
import { adminDatabaseUrl } from './env.js'
import { migrationsUpTo } from './migrations.js'
import { temporaryDirectory } from './temp.js'

/**
 * A database of its own for the file, migrated up to migration `last` in `beforeAll` and dropped
 * in `afterAll`: a ledger as an older release left it, for an upgrade test. `url` migrates it further.
 */
export function ledgerAtMigration(last: number): { url: string; readonly sql: postgres.Sql } {
  const name = `hl_test_${randomBytes(6).toString('hex')}`
  const target = new URL(adminDatabaseUrl())
  target.pathname = `/${name}`
  const url = target.toString()
  let sql: postgres.Sql | undefined
  beforeAll(async () => {
    await migrateLedger(
      url,
      createLogger('silent'),
      migrationsUpTo(last, temporaryDirectory('hookledger-upgrade-')),
    )
    sql = postgres(url, { max: 4, onnotice: () => {} })
  })
  afterAll(async () => {
    await sql?.end({ timeout: 5 })
    const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end({ timeout: 5 })
  })
  return {
    url,
    get sql() {
      if (sql === undefined) throw new Error('the database is made in beforeAll')
      return sql
    },
  }
}
