import { describe, expect, it } from 'vitest'
import type { Role } from '../../src/service/service.js'
import { signedHeaders } from '../support/signing.js'
import { serviceBehindProxy } from './ledger-outage.js'

// The real service in a child process, its ledger behind a proxy that resets every PostgreSQL
// connection three times while deliveries arrive: the process must stay up and recover on its own
// (a lost connection answers 503, never kills it), and every delivery that got a 200 is forwarded.

const RESETS = 3
const SENDERS = 4
const MAX_DELIVERIES = 600
const LOAD_DEADLINE_MS = 45_000

const outage = serviceBehindProxy('hookledger-pg-reset-')

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))

async function runThroughResets(role: Role, prefix: string) {
  const running = await outage.start(role)
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
      expect(outage.proxy.reset()).toBeGreaterThan(0)
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
    const rows = await outage.harness.database.sql<Array<{ event_id: string; status: string }>>`
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
      const rows = await outage.harness.database.sql`
        select e.event_id, e.status::text, e.attempts, e.enqueued_at, e.lease_until, e.last_error
        from inbound_events e where e.status <> 'done' and e.event_id like ${`${prefix}_%`}`
      throw new Error(`${error.message}\n${JSON.stringify(rows, null, 1)}\n${running.output().slice(-6000)}`)
    })
  const forwarded = new Set(
    outage.sink.received.map((r) => (JSON.parse(r.body) as { eventId: string }).eventId),
  )
  expect(accepted.filter((eventId) => !forwarded.has(eventId))).toEqual([])
  expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
  expect(running.process.exitCode).toBeNull()
  await running.kill('SIGTERM')
}

describe('PostgreSQL connections reset under load', () => {
  it('role all: three resets; the process stays up and every accepted event is DONE and forwarded', async () => {
    await runThroughResets('all', 'evt_reset_all')
  }, 120_000)
})
