import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { type Ledger, openLedger } from '../../src/db/client.js'
import { migrateLedger, readDeploymentId } from '../../src/db/migrate.js'
import { createLogger } from '../../src/logger.js'
import { adminDatabaseUrl } from './env.js'

export interface TestDatabase extends Ledger {
  url: string
  name: string
  deploymentId: string
  /** Closes the pool and drops the database. */
  drop(): Promise<void>
}

/**
 * A fresh, migrated database of its own, so test files never see each other's rows (and, through the
 * deployment id, never each other's queues).
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `hl_test_${randomBytes(6).toString('hex')}`
  const url = new URL(adminDatabaseUrl())
  url.pathname = `/${name}`
  await migrateLedger(url.toString(), createLogger('silent'))
  const ledger = openLedger(url.toString(), { max: 30 })
  const deploymentId = await readDeploymentId(ledger.db)
  return {
    ...ledger,
    url: url.toString(),
    name,
    deploymentId,
    async drop() {
      await ledger.close()
      const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
      try {
        await admin.unsafe(`drop database if exists "${name}" with (force)`)
      } finally {
        await admin.end({ timeout: 5 })
      }
    },
  }
}
