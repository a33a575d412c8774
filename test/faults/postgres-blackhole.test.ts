import { describe, expect, it } from 'vitest'
import { signedHeaders } from '../support/signing.js'
import { serviceBehindProxy } from './ledger-outage.js'

// The real service in a child process, its ledger behind a proxy that blackholes the path while
// deliveries arrive: every socket stays open and nothing gets through, so no error ever comes from
// the network (a vanished primary, a NAT that lost its state). Without deadlines of its own the
// service waited on those sockets for the kernel's 15 minutes. Requests during the blackhole must be
// answered 503 within 15 s, and once the path is back every delivery that got a 200 is forwarded
// within 60 s, with no restart. The same runs with PgBouncer (transaction mode) between the service
// and the proxy: the service's connections to PgBouncer stay healthy while PgBouncer's own server
// connections hang, and PgBouncer queues new transactions rather than failing them.

const SENDERS = 4
const MAX_DELIVERIES = 800
const LOAD_DEADLINE_MS = 80_000
const BLACKHOLE_MS = 20_000
/** How long a request may wait for its answer during the blackhole. */
const ANSWER_WITHIN_MS = 15_000
/** How long after the path is back every delivery that got a 200 must have been forwarded. */
const FORWARDED_WITHIN_MS = 60_000

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))

interface Answer {
  status: number | 'no answer'
  sentAt: number
  answeredAt: number
}

describe.each([
  { path: 'direct', pgbouncer: false },
  { path: 'through PgBouncer', pgbouncer: true },
])('PostgreSQL path blackholed under load, $path', ({ pgbouncer }) => {
  const outage = serviceBehindProxy('hookledger-pg-blackhole-', { pgbouncer })

  it('answers 503 within 15 s during the blackhole, and forwards every accepted event within 60 s after', async () => {
    const running = await outage.start('all')
    const accepted: string[] = []
    const answers: Answer[] = []
    let sent = 0
    let stopped = false
    const loadDeadline = Date.now() + LOAD_DEADLINE_MS
    const sender = async () => {
      while (!stopped && sent < MAX_DELIVERIES && Date.now() < loadDeadline) {
        const eventId = `evt_blackhole_${sent}`
        sent += 1
        const body = JSON.stringify({ type: 'order.paid', eventId })
        const sentAt = Date.now()
        const status = await fetch(`${running.url}/webhooks/acme`, {
          method: 'POST',
          body,
          headers: signedHeaders(body, { id: eventId }),
          // Far past the bound under test, so a hung request shows as one that took too long.
          signal: AbortSignal.timeout(ANSWER_WITHIN_MS * 2),
        }).then(
          async (response) => {
            const answer = (await response.json()) as { status?: string }
            if (response.status === 200 && answer.status === 'accepted') accepted.push(eventId)
            return response.status
          },
          () => 'no answer' as const,
        )
        answers.push({ status, sentAt, answeredAt: Date.now() })
        // A provider that got no 200 retries later; a sender here paces itself instead.
        if (status !== 200) await sleep(200)
      }
    }
    const senders = Array.from({ length: SENDERS }, sender)
    const acceptedSince = (since: number, count: number, timeout: number) =>
      expect
        .poll(() => accepted.length - since, { timeout })
        .toBeGreaterThanOrEqual(count)
        .catch((error: Error) => {
          throw new Error(`${error.message}\n${running.output().slice(-6000)}\n${outage.pgbouncerLog()}`)
        })

    let blackholedAt = 0
    let forwardedAt = 0
    try {
      await acceptedSince(0, 30, 20_000)
      await sleep(100) // forwards and DONE marks in flight, not only claims
      blackholedAt = Date.now()
      expect(outage.proxy.blackhole()).toBeGreaterThan(0)
      await sleep(BLACKHOLE_MS)
      forwardedAt = Date.now()
      outage.proxy.forward()
      // New traffic is accepted again with no restart.
      await acceptedSince(accepted.length, 20, 30_000)
    } finally {
      stopped = true
      await Promise.all(senders)
    }

    // Every request in flight while the path was blackholed (sent before it, or during it) was
    // answered within the bound: 503, or 200 for one whose claim had committed just before, or one
    // still waiting (in PgBouncer's queue) when the path came back and committed then.
    const during = answers.filter((a) => a.answeredAt >= blackholedAt && a.sentAt < forwardedAt)
    const waits = during.map((a) => a.answeredAt - a.sentAt).sort((a, b) => a - b)
    const statuses = [...new Set(during.map((a) => a.status))]
    console.log(
      `blackhole: ${during.length} requests, answers ${JSON.stringify(statuses)}, waits ms ${JSON.stringify(waits)}`,
    )
    expect(Math.max(...waits), running.output().slice(-4000)).toBeLessThanOrEqual(ANSWER_WITHIN_MS)
    expect(during.filter((a) => a.status === 503).length).toBeGreaterThan(0)
    expect(
      during.filter(
        (a) =>
          a.status !== 503 && !(a.status === 200 && (a.sentAt < blackholedAt || a.answeredAt >= forwardedAt)),
      ),
      running.output().slice(-4000),
    ).toEqual([])
    // And nothing anywhere got a 500 or no answer at all.
    expect(answers.filter((a) => a.status !== 200 && a.status !== 503)).toEqual([])

    // Every delivery that got a 200 reaches the destination within the bound, with no restart.
    const forwarded = () =>
      new Set(outage.sink.received.map((r) => (JSON.parse(r.body) as { eventId: string }).eventId))
    await expect
      .poll(() => accepted.filter((eventId) => !forwarded().has(eventId)), {
        timeout: Math.max(1000, forwardedAt + FORWARDED_WITHIN_MS - Date.now()),
        interval: 250,
      })
      .toEqual([])
      .catch(async (error: Error) => {
        const rows = await outage.harness.database.sql`
          select e.event_id, e.status::text, e.attempts, e.enqueued_at, e.lease_until, e.last_error
          from inbound_events e where e.status <> 'done'`
        throw new Error(
          `${error.message}\n${JSON.stringify(rows, null, 1)}\n${running.output().slice(-6000)}`,
        )
      })
    console.log(
      `all ${accepted.length} accepted events forwarded ${Date.now() - forwardedAt} ms after the path came back`,
    )
    // The loops said what held them, instead of waiting in silence.
    expect(running.output()).toContain('relay pass failed')
    expect(running.output()).toContain('STATEMENT_TIMEOUT')
    expect(running.process.exitCode).toBeNull()
    expect(running.process.signalCode).toBeNull()
    expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
    await running.kill('SIGTERM')
  }, 180_000)
})
