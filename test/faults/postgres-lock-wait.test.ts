import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Ledger, openLedger } from '../../src/db/client.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { holdInTransaction } from '../support/gate.js'

// A statement that waits on a lock (a row another transaction updates, a table an operator locked)
// keeps its connection for as long as the lock is held. The driver as published then sent the next
// statement, once every connection was busy, down the first busy connection, behind that wait: a
// lease or a claim stood still for seconds while other connections freed within a millisecond. The
// patched driver (patches/postgres+3.4.9.patch) gives it to the first connection that frees.

let database: TestDatabase
const ledgers: Ledger[] = []

beforeAll(async () => {
  database = await createTestDatabase()
  await database.sql`create table lock_probe (id int)`
})
afterAll(async () => {
  await Promise.all(ledgers.map((ledger) => ledger.close()))
  await database.drop()
})

/** Holds an exclusive lock on lock_probe until the returned release is called. */
const holdLock = () =>
  holdInTransaction(database.sql, (tx) => tx`lock table lock_probe in access exclusive mode`)

const waitingOnLocks = async () => {
  const [row] = await database.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock'`
  return row?.n ?? 0
}

describe('a statement waiting on a lock', () => {
  it.each(['sql', 'genericPlans'] as const)(
    "holds back no other statement of the ledger's %s: the next goes to the first connection that frees",
    async (pool) => {
      // Four connections in either pool.
      const ledger = openLedger(database.url, { max: 4 })
      ledgers.push(ledger)
      const client = ledger[pool]
      // Every connection open and idle, as in a process that has been running a while.
      await Promise.all([1, 2, 3, 4].map(() => client`select pg_sleep(0.05)`.then((rows) => rows)))
      const release = await holdLock()
      try {
        const waiting = client`select count(*)::int as n from lock_probe`.then((rows) => rows)
        await expect.poll(waitingOnLocks, { timeout: 5000 }).toBe(1)
        const busy = [1, 2, 3].map(() => client`select pg_sleep(0.3)`.then((rows) => rows))
        const startedAt = Date.now()
        const quick = client`select 1 as one`.then((rows) => ({ rows, ms: Date.now() - startedAt }))
        const answer = await Promise.race([
          quick,
          new Promise((resolve) => setTimeout(() => resolve('still waiting after 5 s'), 5000)),
        ])
        // It waited for a sleep to end, not for the lock.
        expect(answer).toEqual({ rows: [{ one: 1 }], ms: expect.any(Number) })
        expect((answer as { ms: number }).ms).toBeGreaterThanOrEqual(250)
        expect(await waitingOnLocks()).toBe(1)
        await Promise.all(busy)
        await release()
        expect(await waiting).toEqual([{ n: 0 }])
      } finally {
        await release()
      }
    },
  )
})
