import { sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isLedgerUnavailable, type Ledger, openLedger, postgresErrorCode } from '../../src/db/client.js'
import { watchPass } from '../../src/deadline.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { captureLogs } from '../support/log-capture.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

// Statement deadlines on this side of the connection (the patched driver's `query_timeout`, per scope
// through `Ledger.scoped`): the one thing that notices a path that went silent, since a blackholed
// socket gives no error for the kernel's ~15 minutes of retransmissions.

let database: TestDatabase
let proxy: TcpProxy
const ledgers: Ledger[] = []

beforeAll(async () => {
  database = await createTestDatabase()
  proxy = await startTcpProxy()
})
afterAll(async () => {
  await Promise.all(ledgers.map((ledger) => ledger.close()))
  await proxy.close()
  await database.drop()
})

function open(url: string, options: Parameters<typeof openLedger>[1] = {}): Ledger {
  const ledger = openLedger(url, { max: 2, ...options })
  ledgers.push(ledger)
  return ledger
}

async function failure(promise: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const startedAt = Date.now()
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  )
  return { error, ms: Date.now() - startedAt }
}

describe('statement deadlines', () => {
  it('a statement past its scope deadline fails with STATEMENT_TIMEOUT then, as a lost ledger; the pool goes on', async () => {
    const ledger = open(database.url, { statementTimeoutMs: 10_000 })
    const scoped = ledger.scoped(300)
    const { error, ms } = await failure(scoped.sql`select pg_sleep(2)`)
    expect(postgresErrorCode(error)).toBe('STATEMENT_TIMEOUT')
    expect(isLedgerUnavailable(error)).toBe(true)
    expect(ms).toBeGreaterThanOrEqual(290)
    expect(ms).toBeLessThan(1000)
    expect(await scoped.sql`select 1 as one`).toEqual([{ one: 1 }])
    // The pool's own deadline is the longer one.
    expect(await ledger.sql`select pg_sleep(0.5)`).toHaveLength(1)
  })

  it("a transaction's statements have their scope's deadline too", async () => {
    const scoped = open(database.url).scoped(300)
    const { error, ms } = await failure(
      scoped.db.transaction(async (tx) => {
        await tx.execute(sql`select 1`)
        await tx.execute(sql`select pg_sleep(2)`)
      }),
    )
    expect(postgresErrorCode(error)).toBe('STATEMENT_TIMEOUT')
    expect(ms).toBeLessThan(1000)
    expect(await scoped.db.transaction((tx) => tx.execute(sql`select 2 as two`))).toEqual([{ two: 2 }])
  })

  it('a connection whose path went silent is dropped at the deadline, and a new one works once the path is back', async () => {
    const scoped = open(proxy.urlFor(database.url)).scoped(500)
    expect(await scoped.sql`select 1 as one`).toEqual([{ one: 1 }])
    expect(proxy.blackhole()).toBeGreaterThan(0)
    const { error, ms } = await failure(scoped.sql`select 1 as one`)
    proxy.forward()
    expect(postgresErrorCode(error)).toBe('STATEMENT_TIMEOUT')
    expect(ms).toBeLessThan(1500)
    expect(await scoped.sql`select 1 as one`).toEqual([{ one: 1 }])
  })

  it('statements waiting for a connection while every one is silent fail at their deadline too, however many wait', async () => {
    const scoped = open(proxy.urlFor(database.url)).scoped(500)
    // Both connections open, then the path goes silent under them.
    await Promise.all([1, 2].map(() => scoped.sql`select pg_sleep(0.05)`.then((rows) => rows)))
    proxy.blackhole()
    const outcomes = await Promise.all(
      // Two head the silent connections; four wait in the pool's queue for one to free.
      [1, 2, 3, 4, 5, 6].map(() => failure(scoped.sql`select 1 as one`)),
    )
    proxy.forward()
    for (const { error, ms } of outcomes) {
      expect(postgresErrorCode(error)).toBe('STATEMENT_TIMEOUT')
      expect(ms).toBeLessThan(1500)
    }
    expect(await scoped.sql`select 1 as one`).toEqual([{ one: 1 }])
  })

  it('the server gets the longest deadline as its statement_timeout, and ends sessions idle in a transaction', async () => {
    const ledger = open(database.url, { statementTimeoutMs: 12_345, idleInTransactionMs: 600 })
    expect(await ledger.sql`show statement_timeout`).toEqual([{ statement_timeout: '12345ms' }])
    // A client gone silent mid-transaction would hold its row locks until the server gives up on it.
    const { error } = await failure(
      ledger.sql.begin(async (tx) => {
        await tx`select 1`
        await new Promise((wake) => setTimeout(wake, 1500))
        await tx`select 2`
      }),
    )
    expect(postgresErrorCode(error)).toMatch(/^(25P03|CONNECTION_CLOSED|57P05)$/)
  })
})

describe('watchPass', () => {
  it('warns while a pass runs past its bound, naming the loop and how long, and says when it ended', async () => {
    const logs = captureLogs('warn')
    const result = await watchPass(new Promise((done) => setTimeout(() => done('ok'), 350)), {
      logger: logs.logger,
      loop: 'relay',
      stuckAfterMs: 100,
    })
    expect(result).toBe('ok')
    const entries = logs.entries()
    const stuck = entries.filter((entry) => String(entry.msg).startsWith('relay pass stuck'))
    expect(stuck.length).toBeGreaterThanOrEqual(2)
    expect(stuck[0]).toMatchObject({ loop: 'relay' })
    // A timer may fire a millisecond before Date.now() says its delay has passed.
    expect(Number(stuck[0]?.runningMs)).toBeGreaterThanOrEqual(95)
    expect(entries.at(-1)).toMatchObject({
      loop: 'relay',
      msg: expect.stringMatching(/^relay pass ended after/),
    })
  })

  it('says nothing of a pass that ends in time', async () => {
    const logs = captureLogs('warn')
    await watchPass(Promise.resolve(1), { logger: logs.logger, loop: 'retention', stuckAfterMs: 100 })
    await new Promise((wake) => setTimeout(wake, 150))
    expect(logs.entries()).toEqual([])
  })
})
