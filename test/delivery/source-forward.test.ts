import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { operationBatches } from '../../src/db/operation-batches.js'
import { json } from '../../src/db/operation-rows.js'
import { forwardArgs } from '../../src/delivery/forward.js'
import { payloadHash } from '../../src/outbound/hash.js'
import { stepKey } from '../../src/outbound/keys.js'
import { buildConfig } from '../../src/service/config.js'
import {
  adminCookie,
  busiestWindow,
  deliverEvent,
  enableOnAdminPage,
  metricLine as metric,
  statusCounts,
  useDeliveryTest,
} from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// A source whose config says `handler: { type: 'forward' }` delivers through its one route: the same
// guard, 410 handling and metrics as a route's forward, with the Idempotency-Key such a source has
// always had. It is sent outside the outbound ledger: the event's row is its record.

const t = useDeliveryTest()
const ADMIN_TOKEN = 'admin-token-for-the-source-forward-tests'

function config(
  source: string,
  handler: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Config {
  return buildConfig(
    {
      sources: [
        {
          id: source,
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', ...handler },
        },
      ],
      worker: { ...FAST_WORKER, maxAttempts: 8 },
      relay: FAST_RELAY,
      ...extra,
    },
    () => undefined,
  )
}

const statuses = (source: string) => statusCounts(t.database.sql, source)

async function errorAttempts(source: string): Promise<number> {
  const [row] = await t.database.sql<Array<{ n: number }>>`
    select count(*)::int as n from event_attempts a join inbound_events e on e.id = a.event_row_id
    where e.source = ${source} and a.outcome = 'error'`
  return row?.n ?? 0
}

/** `<event id> <status>` of each DONE attempt of the source's events, sorted. */
async function doneAttempts(source: string): Promise<string[]> {
  const rows = await t.database.sql<Array<{ line: string }>>`
    select e.event_id || ' ' || a.response_status as line from event_attempts a
    join inbound_events e on e.id = a.event_row_id
    where e.source = ${source} and a.outcome = 'done' order by 1`
  return rows.map((row) => row.line)
}

async function operationCount(source: string): Promise<number> {
  const [row] = await t.database.sql<Array<{ n: number }>>`
    select count(*)::int as n from operations where operation_key like ${`${source}:%`}`
  return row?.n ?? 0
}

describe('a source forward (handler: forward) is its one route', () => {
  it('obeys its rate limit: at most 10 a second, each event sent once under its own key', async () => {
    const arrivals: number[] = []
    const keys: string[] = []
    const destination = await startSink((request) => {
      arrivals.push(Date.now())
      keys.push(String(request.headers['idempotency-key']))
      return { status: 200 }
    })
    t.closeAfter(destination.close)
    const service = await t.start({
      config: config('rl', { url: destination.url, rateLimit: { perSecond: 10 } }),
    })
    const ids = Array.from({ length: 40 }, (_, i) => `evt_rl_${i}`)
    await Promise.all(ids.map((id) => deliverEvent(service.url, 'rl', id)))
    await expect.poll(() => statuses('rl'), { timeout: 30_000, interval: 250 }).toEqual({ done: 40 })

    expect(arrivals).toHaveLength(40)
    expect(new Set(keys)).toEqual(new Set(ids.map((id) => `rl:${id}`)))
    // Fixed one-second windows (rate-limiter-flexible): a sliding second can straddle two of them.
    expect(busiestWindow(arrivals, 1000)).toBeLessThanOrEqual(20)
    expect(busiestWindow(arrivals, 2000)).toBeLessThanOrEqual(30)
    const spread = Math.max(...arrivals) - Math.min(...arrivals)
    expect(spread).toBeGreaterThanOrEqual(2000)
    // An event held back waits for the limit only: none waits out a lease before it goes.
    expect(spread).toBeLessThan(12_000)
    // Waiting for the limit used up no attempt; each event's one attempt records its 200, and the
    // forward wrote nothing to the outbound ledger.
    expect(await errorAttempts('rl')).toBe(0)
    expect(await doneAttempts('rl')).toEqual(ids.map((id) => `${id} 200`).sort())
    expect(await operationCount('rl')).toBe(0)
  }, 60_000)

  it('opens its circuit after consecutive failures, holds events back without spending attempts, and closes', async () => {
    let healthy = false
    const answered200: string[] = []
    const destination = await startSink((request) => {
      if (healthy) answered200.push(String(request.headers['x-hookledger-event-id']))
      return { status: healthy ? 200 : 503 }
    })
    t.closeAfter(destination.close)
    const service = await t.start({
      config: config('cb', {
        url: destination.url,
        circuitBreaker: { failureThreshold: 3, coolDownMs: 1500 },
      }),
    })
    const url = service.url
    const open = 'hookledger_destination_circuit_open{destination="cb/forward"}'
    await Promise.all(Array.from({ length: 6 }, (_, i) => deliverEvent(url, 'cb', `evt_cb_${i}`)))
    await expect.poll(() => metric(url, open), { timeout: 15_000 }).toBe(`${open} 1`)
    // Events that arrive while it is open are held back before anything is sent.
    await Promise.all(Array.from({ length: 6 }, (_, i) => deliverEvent(url, 'cb', `evt_cb_open_${i}`)))
    const atOpen = destination.received.length
    await new Promise((resolve) => setTimeout(resolve, 3000))
    // Only a half-open probe per cool-down reaches the destination meanwhile.
    expect(destination.received.length - atOpen).toBeLessThanOrEqual(3)
    expect((await statuses('cb')).failed).toBeUndefined()
    // Each attempt spent is a send that reached the destination: waiting on the circuit spent none.
    expect(await errorAttempts('cb')).toBeLessThanOrEqual(destination.received.length)

    healthy = true
    await expect.poll(() => statuses('cb'), { timeout: 10_000 }).toEqual({ done: 12 })
    expect(await metric(url, open)).toBe(`${open} 0`)
    expect(await metric(url, 'hookledger_destination_consecutive_failures{destination="cb/forward"}')).toBe(
      'hookledger_destination_consecutive_failures{destination="cb/forward"} 0',
    )
    // Every event reached the destination with a 200 exactly once.
    expect(await doneAttempts('cb')).toHaveLength(12)
    const ids = ['evt_cb_', 'evt_cb_open_'].flatMap((prefix) =>
      Array.from({ length: 6 }, (_, i) => `${prefix}${i}`),
    )
    expect(answered200.sort()).toEqual(ids.sort())
  }, 60_000)

  it('410 Gone disables it: events pause, nothing is FAILED, and re-enabling it delivers them', async () => {
    let gone = true
    const destination = await startSink(() => ({ status: gone ? 410 : 200 }))
    t.closeAfter(destination.close)
    const service = await t.start({
      env: { ADMIN_TOKEN },
      config: config('gone', { url: destination.url }, { delivery: { pausedRecheckMs: 300 } }),
    })
    const url = service.url
    await deliverEvent(url, 'gone', 'evt_gone_1')
    await expect
      .poll(() => t.database.sql`select source, route_id, reason from disabled_routes`, { timeout: 15_000 })
      .toEqual([{ source: 'gone', route_id: 'forward', reason: `${destination.url} answered 410 Gone` }])
    await deliverEvent(url, 'gone', 'evt_gone_2')
    await new Promise((resolve) => setTimeout(resolve, 1500))
    expect(destination.received).toHaveLength(1)
    await expect.poll(() => statuses('gone'), { timeout: 2000, interval: 50 }).toEqual({ pending: 2 })
    expect(await errorAttempts('gone')).toBe(0)
    // The send answered 410 is the event's attempt, paused: recorded, and no attempt spent.
    const attempts = await t.database.sql<
      Array<{ event_id: string; outcome: string; response_status: number }>
    >`
      select e.event_id, a.outcome, a.response_status from event_attempts a
      join inbound_events e on e.id = a.event_row_id where e.source = 'gone'`
    expect(attempts).toEqual([{ event_id: 'evt_gone_1', outcome: 'paused', response_status: 410 }])

    // The admin page lists it as the source's route, disabled, with an Enable button.
    const cookie = await adminCookie(url, ADMIN_TOKEN)
    const routesPage = await (await fetch(`${url}/admin/routes`, { headers: { cookie } })).text()
    expect(routesPage).toContain('gone/forward')
    expect(routesPage).toContain('action="/admin/routes/gone/forward/enable"')

    gone = false
    await t.database.sql`delete from disabled_routes where source = 'gone' and route_id = 'forward'`
    await expect.poll(() => statuses('gone'), { timeout: 15_000 }).toEqual({ done: 2 })
    expect(destination.received).toHaveLength(3)
  }, 60_000)

  it('re-enabled on the admin page, its paused events go out at once, one in backoff too, on the in-process queue', async () => {
    // One event fails with a 503 and waits out a minute's backoff; the next one's 410 disables the
    // route and pauses it for a minute. Re-enabling the source's forward resumes both.
    let gone = true
    const destination = await startSink(({ body }) => ({
      status: gone ? (body.includes('evt_back_retry') ? 503 : 410) : 200,
    }))
    t.closeAfter(destination.close)
    const service = await t.start({
      env: { ADMIN_TOKEN },
      inProcessQueue: true,
      config: config(
        'back',
        { url: destination.url },
        {
          delivery: { pausedRecheckMs: 60_000 },
          worker: { ...FAST_WORKER, maxAttempts: 8, backoffBaseMs: 60_000, backoffMaxMs: 60_000 },
        },
      ),
    })
    const url = service.url
    const waitingAMinute = async () =>
      (
        await t.database.sql<Array<{ n: number }>>`
          select count(*)::int as n from inbound_events
          where source = 'back' and status = 'pending' and next_attempt_at > now() + interval '30 seconds'`
      )[0]?.n
    await deliverEvent(url, 'back', 'evt_back_retry')
    await expect.poll(waitingAMinute, { timeout: 15_000 }).toBe(1)
    await deliverEvent(url, 'back', 'evt_back_0')
    await expect
      .poll(() => t.database.sql`select route_id from disabled_routes where source = 'back'`, {
        timeout: 15_000,
      })
      .toEqual([{ route_id: 'forward' }])
    await expect.poll(waitingAMinute, { timeout: 15_000 }).toBe(2)

    gone = false
    const enabled = await enableOnAdminPage(url, await adminCookie(url, ADMIN_TOKEN), 'back', 'forward')
    expect(enabled.status).toBe(303)
    expect(enabled.page).toContain('back/forward enabled: 2 paused deliveries go out now.')
    await expect.poll(() => statuses('back'), { timeout: 15_000 }).toEqual({ done: 2 })
    expect(destination.received).toHaveLength(4)
  }, 60_000)

  it('sends an event whose forward an earlier version left claimed, without waiting for that claim', async () => {
    const destination = await startSink(() => ({ status: 200 }))
    t.closeAfter(destination.close)
    const payload = { type: 'order.created', id: 'evt_old_1' }
    const raw = Buffer.from(JSON.stringify(payload))
    const args = forwardArgs('up', 'evt_old_1', raw)
    // What a worker of an earlier version, which sent a source's forward through the outbound
    // ledger, left when it died mid-forward: the operation claimed under the forward's key with its
    // first attempt in flight, under a lease still running. The event's own lease, which that worker
    // held too, is what keeps two workers off one event; this version goes by it alone.
    const claimed = await operationBatches(t.database.sql).claimFresh.run({
      key: stepKey(['up', 'evt_old_1'], 'forward'),
      tool: 'forward',
      effect: 'idempotent',
      payloadHash: payloadHash(args),
      argsJson: json(args) ?? 'null',
      leaseToken: randomUUID(),
      leaseMs: 600_000,
      actor: 'runtime',
      undoRefJson: null,
      runId: 'previous-version/1',
      traceId: null,
      toolCallId: null,
    })
    expect(claimed?.operationKey).toBe('up:evt_old_1:forward')
    const service = await t.start({ config: config('up', { url: destination.url }) })
    await deliverEvent(service.url, 'up', 'evt_old_1', payload)
    await expect.poll(() => statuses('up'), { timeout: 15_000 }).toEqual({ done: 1 })
    expect(destination.received).toHaveLength(1)
    expect(destination.received[0]?.headers['idempotency-key']).toBe('up:evt_old_1')
    // The earlier version's operation is left as it was.
    const operations = await t.database.sql<Array<{ id: string; status: string }>>`
      select id, status::text from operations where operation_key like 'up:%'`
    expect(operations).toEqual([{ id: claimed?.id, status: 'in_progress' }])
  }, 30_000)

  it('stops a forward that starts late in its lease (a slow evidence step) before the lease ends', async () => {
    // The event's lease is all that keeps a second worker from sending the event while the first
    // still is. An evidence step runs ahead of the handler and outside its deadline, so a slow one
    // leaves the handler less of the lease than handlerTimeoutMs; its deadline then ends a margin
    // before the lease does (FAST_WORKER: leaseMs 3000, handlerTimeoutMs 2000, a margin of 500 ms).
    const arrivals: number[] = []
    const destination = await startSink(async (_request, index) => {
      arrivals.push(Date.now())
      // The first send hangs past every deadline; the retry is answered at once.
      if (index === 0) await new Promise((resolve) => setTimeout(resolve, 5000))
      return { status: 200 }
    })
    t.closeAfter(destination.close)
    const lateConfig = buildConfig(
      {
        sources: [
          {
            id: 'late',
            verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
            handler: { type: 'forward', url: destination.url, timeoutMs: 10_000 },
            evidence: [
              {
                eventTypes: ['charge.succeeded'],
                operationKey: '/data/object/metadata/hookledger_key',
                settles: { keyPrefixes: ['order_'] },
              },
            ],
          },
        ],
        worker: { ...FAST_WORKER, maxAttempts: 3 },
        relay: FAST_RELAY,
      },
      () => undefined,
    )
    const service = await t.start({ config: lateConfig })
    // The evidence step's insert waits behind this lock for 1.5 s of the lease.
    const lockHeld = t.database.sql.begin(async (tx) => {
      await tx`lock table operation_evidence in share mode`
      const payload = {
        type: 'charge.succeeded',
        id: 'evt_late_1',
        data: { object: { metadata: { hookledger_key: 'order_late_1' } } },
      }
      await deliverEvent(service.url, 'late', 'evt_late_1', payload)
      await expect
        .poll(
          async () =>
            (
              await t.database.sql<Array<{ n: number }>>`
                select count(*)::int as n from pg_locks l join pg_class c on c.oid = l.relation
                where c.relname = 'operation_evidence' and not l.granted`
            )[0]?.n,
          { timeout: 10_000, interval: 20 },
        )
        .toBe(1)
      await new Promise((resolve) => setTimeout(resolve, 1500))
    })
    await lockHeld
    await expect.poll(() => statuses('late'), { timeout: 15_000 }).toEqual({ done: 1 })

    const attempts = await t.database.sql<
      Array<{ outcome: string; error: string | null; startedAt: number; finishedAt: number }>
    >`
      select a.outcome::text, a.error,
             extract(epoch from a.started_at)::float8 * 1000 as "startedAt",
             extract(epoch from a.finished_at)::float8 * 1000 as "finishedAt"
      from event_attempts a join inbound_events e on e.id = a.event_row_id
      where e.source = 'late' order by a.attempt`
    expect(attempts.map((attempt) => attempt.outcome)).toEqual(['error', 'done'])
    const [first] = attempts
    // Cut to what the lease had left (~1000 ms), not handlerTimeoutMs: the attempt, evidence step
    // included, ended within the lease (taken before the attempt started). Uncut, it would have run
    // ~3500 ms, past the lease's 3000.
    const cut = /handler did not finish within (\d+) ms, what its lease had left/.exec(first?.error ?? '')
    expect(cut, first?.error ?? '').not.toBeNull()
    expect(Number(cut?.[1])).toBeLessThan(2000)
    expect((first?.finishedAt ?? 0) - (first?.startedAt ?? 0)).toBeLessThan(3000)
    // The second send went out after the first was given up on, not beside it.
    expect(arrivals).toHaveLength(2)
    expect(arrivals[1]).toBeGreaterThanOrEqual(first?.finishedAt ?? Number.POSITIVE_INFINITY)
  }, 30_000)
})
