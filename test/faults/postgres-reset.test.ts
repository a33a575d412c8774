import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Role } from '../../src/service/service.js'
import { type Child, startChild } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testRedisUrl } from '../support/env.js'
import { FAST_RELAY } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

// The real service in a child process, its ledger behind a proxy that resets every PostgreSQL
// connection three times while deliveries arrive: the process must stay up and recover on its own
// (a lost connection answers 503, never kills it), and every delivery that got a 200 is forwarded.

const RESETS = 3
const SENDERS = 4
const MAX_DELIVERIES = 600
const LOAD_DEADLINE_MS = 45_000

let database: TestDatabase
let proxy: TcpProxy
let sink: Awaited<ReturnType<typeof startSink>>
let directory: string
let child: Child | undefined

beforeAll(async () => {
  database = await createTestDatabase()
  proxy = await startTcpProxy()
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  directory = mkdtempSync(join(tmpdir(), 'hookledger-pg-reset-'))
  writeFileSync(
    join(directory, 'config.json'),
    JSON.stringify({
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sink.url, timeoutMs: 1000 },
        },
      ],
      // Attempts to spare: an attempt a reset cuts short counts as one, and a forward cut short keeps
      // its operation leased (forward timeout + 5 s) while later attempts wait for it (issue item 4).
      worker: {
        concurrency: 4,
        maxAttempts: 20,
        backoffBaseMs: 100,
        backoffMaxMs: 1000,
        handlerTimeoutMs: 3000,
        leaseMs: 4000,
        stalledIntervalMs: 1000,
      },
      outbound: { leaseMs: 1500, backoffMaxMs: 1000 },
      relay: FAST_RELAY,
    }),
  )
})
afterAll(async () => {
  await child?.kill()
  await proxy.close()
  await sink.close()
  await database.drop()
  rmSync(directory, { recursive: true, force: true })
})

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))

async function runThroughResets(role: Role, prefix: string) {
  child = await startChild(['bin/hookledger.js', 'serve', '--role', role], {
    DATABASE_URL: proxy.urlFor(database.url),
    REDIS_URL: testRedisUrl(),
    HOOKLEDGER_CONFIG: join(directory, 'config.json'),
    LOG_LEVEL: 'warn',
  })
  const running = child
  const accepted: string[] = []
  const answers = new Map<number | string, number>()
  let sent = 0
  let stopped = false
  const loadDeadline = Date.now() + LOAD_DEADLINE_MS
  const sender = async () => {
    while (!stopped && sent < MAX_DELIVERIES && Date.now() < loadDeadline) {
      const eventId = `${prefix}_${sent}`
      sent += 1
      const body = JSON.stringify({ type: 'order.paid', eventId })
      const status = await fetch(`${running.url}/webhooks/acme`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: eventId }),
      }).then(
        async (response) => {
          const answer = (await response.json()) as { status?: string }
          if (response.status === 200 && answer.status === 'accepted') accepted.push(eventId)
          return response.status
        },
        () => 'no answer',
      )
      answers.set(status, (answers.get(status) ?? 0) + 1)
    }
  }
  const senders = Array.from({ length: SENDERS }, sender)
  const progress = (since: number) =>
    expect
      .poll(() => accepted.length - since, { timeout: 15_000 })
      .toBeGreaterThanOrEqual(20)
      .catch((error: Error) => {
        throw new Error(`${error.message}; answers ${JSON.stringify([...answers])}\n${running.output()}`)
      })
  try {
    for (let reset = 0; reset < RESETS; reset += 1) {
      // Spaced out: each reset waits for deliveries accepted (so recovered) since the one before.
      await progress(accepted.length)
      await sleep(100) // forwards and DONE marks in flight, not only claims
      expect(proxy.reset()).toBeGreaterThan(0)
    }
    await progress(accepted.length)
  } finally {
    stopped = true
    await Promise.all(senders)
  }

  expect(running.process.exitCode, running.output()).toBeNull()
  expect(running.process.signalCode, running.output()).toBeNull()
  // Every delivery got an answer, and a cut connection answers 503 (the provider retries), never 500.
  expect(
    [...answers.keys()].filter((status) => status !== 200 && status !== 503),
    JSON.stringify([...answers]),
  ).toEqual([])
  // Every accepted delivery ends DONE and reaches the destination, with no restart.
  const statuses = async () => {
    const rows = await database.sql<Array<{ event_id: string; status: string }>>`
      select event_id, status::text from inbound_events where event_id like ${`${prefix}_%`}`
    return new Map(rows.map((row) => [row.event_id, row.status]))
  }
  await expect
    .poll(
      async () => {
        const byId = await statuses()
        return accepted.filter((eventId) => byId.get(eventId) !== 'done')
      },
      { timeout: 30_000, interval: 500 },
    )
    .toEqual([])
    .catch(async (error: Error) => {
      const rows = await database.sql`
        select e.event_id, e.status::text, e.attempts, e.enqueued_at, e.lease_until, e.last_error
        from inbound_events e where e.status <> 'done' and e.event_id like ${`${prefix}_%`}`
      throw new Error(`${error.message}\n${JSON.stringify(rows, null, 1)}\n${running.output().slice(-6000)}`)
    })
  const forwarded = new Set(sink.received.map((r) => (JSON.parse(r.body) as { eventId: string }).eventId))
  expect(accepted.filter((eventId) => !forwarded.has(eventId))).toEqual([])
  expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
  expect(running.process.exitCode).toBeNull()
  await running.kill('SIGTERM')
  child = undefined
}

describe('PostgreSQL connections reset under load', () => {
  it('role all: three resets; the process stays up and every accepted event is DONE and forwarded', async () => {
    await runThroughResets('all', 'evt_reset_all')
  }, 120_000)
})
