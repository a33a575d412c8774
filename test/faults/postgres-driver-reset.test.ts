import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openLedger } from '../../src/db/client.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { gate } from '../support/gate.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

// The postgres-js driver itself behind a resetting proxy, in this process. Unpatched 3.4.9 throws
// `Cannot read properties of null (reading 'write')` from a setImmediate (the process dies), and a
// connection whose socket died with a write buffered never flushes again. The patch is
// patches/postgres+3.4.9.patch, applied by `npm ci` (prepare) and bundled into the packed package.

let database: TestDatabase
let proxy: TcpProxy

beforeAll(async () => {
  database = await createTestDatabase()
  await database.sql`create table reset_witness (n int not null)`
  proxy = await startTcpProxy()
})
afterAll(async () => {
  await proxy.close()
  await database.drop()
})

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))

function proxiedPool(max: number) {
  return postgres(proxy.urlFor(database.url), { max, connect_timeout: 3, onnotice: () => {} })
}

describe('postgres-js behind a proxy that resets every connection', () => {
  it('under load, resets fail the statements in flight; the pool then works again on its own', async () => {
    const sql = proxiedPool(4)
    let stopped = false
    let succeeded = 0
    const failures = new Set<string>()
    const client = async () => {
      while (!stopped) {
        try {
          await sql.begin(async (tx) => {
            await tx`select pg_backend_pid()`
            await tx`select pg_sleep(0.01)`
            await tx`select 1`
          })
          await sql`select 2`
          succeeded += 1
        } catch (error) {
          failures.add(String((error as { code?: unknown }).code))
        }
      }
    }
    const clients = Array.from({ length: 16 }, client)
    try {
      for (let reset = 0; reset < 10; reset += 1) {
        await sleep(250)
        proxy.reset()
      }
      // Recovery: work completes again after the last reset, with no restart of anything.
      const afterResets = succeeded
      await expect.poll(() => succeeded - afterResets, { timeout: 10_000 }).toBeGreaterThan(20)
      expect([...failures].every((code) => code === 'CONNECTION_CLOSED' || code === 'ECONNRESET')).toBe(true)
    } finally {
      stopped = true
      // Every statement settles: none waits forever on a write that was dropped.
      await expect(Promise.race([Promise.all(clients), sleep(10_000).then(() => 'hung')])).resolves.not.toBe(
        'hung',
      )
      await sql.end({ timeout: 1 })
    }
  })

  it("the ledger's pool reconnects within a second or so after every connection was reset", async () => {
    const ledger = openLedger(proxy.urlFor(database.url), { max: 14 })
    const everyConnection = () =>
      Promise.allSettled(Array.from({ length: 14 }, () => ledger.sql`select pg_sleep(0.3)`))
    try {
      const working = everyConnection()
      await sleep(150)
      proxy.reset()
      await working
      // The driver's own backoff grows with the failures of the whole pool (up to 20 s); a query
      // handed to one of the last connections to fail would wait that long.
      const started = Date.now()
      const outcomes = await everyConnection()
      expect(outcomes.filter((outcome) => outcome.status === 'rejected')).toEqual([])
      expect(Date.now() - started).toBeLessThan(5000)
    } finally {
      await ledger.close()
    }
  })

  it('a statement of a transaction whose connection reset fails; it never runs outside the transaction', async () => {
    const sql = proxiedPool(1)
    const reset = gate()
    const transactionStarted = gate()
    const lateOutcomes: string[] = []
    const transaction = sql.begin(async (tx) => {
      await tx`insert into reset_witness values (1)`
      transactionStarted.open()
      await reset.opened
      // The handler carries on after its connection died (as a slow forward does).
      for (const n of [2, 3]) {
        lateOutcomes.push(
          await tx`insert into reset_witness values (${n})`.then(
            () => 'ran',
            (error: { code?: string }) => `rejected ${error.code}`,
          ),
        )
      }
    })
    const outcome = transaction.then(
      () => 'committed',
      (error: { code?: string }) => `rejected ${error.code}`,
    )
    try {
      await transactionStarted.opened
      proxy.reset()
      expect(await outcome).toMatch(/^rejected (CONNECTION_CLOSED|ECONNRESET)$/)
      // The pool's one connection is used (and so reconnected) by other work meanwhile.
      await expect(sql`select 1 as one`).resolves.toEqual([{ one: 1 }])
      reset.open()
      await expect.poll(() => lateOutcomes.length, { timeout: 5000 }).toBe(2)
      expect(lateOutcomes).toEqual(['rejected CONNECTION_CLOSED', 'rejected CONNECTION_CLOSED'])
      expect(await database.sql`select n from reset_witness`).toEqual([])
    } finally {
      reset.open()
      await sql.end({ timeout: 1 })
    }
  })
})
