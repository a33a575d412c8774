import { sql } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { replayEvent } from '../../src/db/replay.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { buildConfig } from '../../src/service/config.js'
import { adminCookie, statusCounts, useDeliveryTest } from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

const ADMIN_TOKEN = 'admin-token-for-the-ordering-tests'
const KEYS = ['cus_a', 'cus_b', 'cus_c']

const t = useDeliveryTest(async (_database) => {
  // written_seq, not ctid, records the order the writes happened in: a fresh table written from
  // several connections at once is extended by several pages, each connection fills its own, and
  // ctid order is then a merge of per-connection runs (seen on a busy CI machine).
  await t.database.sql`
    create table ordered_effects (
      written_seq bigint generated always as identity, customer text not null, n int not null)`
})

function config(source: Record<string, unknown>): Config {
  return buildConfig(
    {
      sources: [{ verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }, ...source }],
      worker: { ...FAST_WORKER, concurrency: 8 },
      relay: FAST_RELAY,
      delivery: { orderingRecheckMs: 100, pausedRecheckMs: 500 },
    },
    () => undefined,
  )
}

/** Sends one after the other, so the order they are received in is the order of this list. */
async function deliverInOrder(
  url: string,
  source: string,
  events: ReadonlyArray<{ customer: string; n: number }>,
) {
  const ids: string[] = []
  for (const event of events) {
    const body = JSON.stringify({ type: 'invoice.paid', data: { object: event } })
    const response = await fetch(`${url}/webhooks/${source}`, {
      method: 'POST',
      body,
      headers: signedHeaders(body, { id: `${source}_${event.customer}_${event.n}` }),
    })
    expect(response.status).toBe(200)
    ids.push(((await response.json()) as { id: string }).id)
  }
  return ids
}

function interleaved(perKey: number) {
  return Array.from({ length: perKey * KEYS.length }, (_, i) => ({
    customer: KEYS[i % KEYS.length] ?? 'cus_a',
    n: Math.floor(i / KEYS.length),
  }))
}

const statuses = (source: string) => statusCounts(t.database.sql, source)

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('ordering keys', () => {
  it('3 keys × 50 interleaved events with random handler delays: each key in received order, one at a time', async () => {
    const active = new Map<string, number>()
    let overlap = 0
    const handler: EventHandler = async ({ event, tx }) => {
      const { customer, n } = (event as { data: { object: { customer: string; n: number } } }).data.object
      active.set(customer, (active.get(customer) ?? 0) + 1)
      if ((active.get(customer) ?? 0) > 1) overlap += 1
      await pause(Math.floor(Math.random() * 30))
      await tx.execute(sql`insert into ordered_effects (customer, n) values (${customer}, ${n})`)
      active.set(customer, (active.get(customer) ?? 1) - 1)
    }
    const service = await t.start({
      config: config({ id: 'ordered', orderingKey: '/data/object/customer' }),
      handlers: { ordered: handler },
    })
    await deliverInOrder(service.url, 'ordered', interleaved(50))
    await expect.poll(() => statuses('ordered'), { timeout: 120_000, interval: 500 }).toEqual({ done: 150 })
    expect(overlap).toBe(0)
    // The order the handlers' writes committed in, per key: exactly the order received.
    const rows = await t.database.sql<Array<{ customer: string; n: number }>>`
      select customer, n from ordered_effects order by written_seq`
    for (const key of KEYS) {
      expect(rows.filter((row) => row.customer === key).map((row) => row.n)).toEqual(
        Array.from({ length: 50 }, (_, n) => n),
      )
    }
  }, 150_000)

  it('a failing head holds back only its own key, shows so on the admin page, and a replay lets its key go', async () => {
    let headFails = true
    const processed: string[] = []
    const handler: EventHandler = async ({ event }) => {
      const { customer, n } = (event as { data: { object: { customer: string; n: number } } }).data.object
      if (customer === 'cus_a' && n === 0 && headFails) throw new Error('cus_a is not set up yet')
      processed.push(`${customer}:${n}`)
    }
    const service = await t.start({
      env: { ADMIN_TOKEN },
      config: config({ id: 'blocked', orderingKey: '/data/object/customer' }),
      handlers: { blocked: handler },
    })
    const ids = await deliverInOrder(service.url, 'blocked', interleaved(5))
    // cus_b and cus_c finish; cus_a's head fails its three attempts and the four behind it wait.
    await expect
      .poll(() => statuses('blocked'), { timeout: 30_000 })
      .toEqual({ done: 10, failed: 1, pending: 4 })
    expect(processed.filter((p) => p.startsWith('cus_a'))).toEqual([])
    for (const key of ['cus_b', 'cus_c']) {
      expect(processed.filter((p) => p.startsWith(key))).toEqual([0, 1, 2, 3, 4].map((n) => `${key}:${n}`))
    }
    const [waiting] = await t.database.sql<Array<{ attempts: number }>>`
      select attempts from inbound_events where source = 'blocked' and event_id = 'blocked_cus_a_1'`
    expect(waiting?.attempts).toBe(0)

    const cookie = await adminCookie(service.url, ADMIN_TOKEN)
    const secondOfA = ids[3]
    const page = await (
      await fetch(`${service.url}/admin/events/${secondOfA}`, { headers: { cookie } })
    ).text()
    expect(page).toContain('Held back by its ordering key (/data/object/customer)')
    expect(page).toContain('blocked_cus_a_0')
    expect(page).toContain('replay it to let the events behind it go')

    headFails = false
    const head = ids[0] ?? ''
    expect(await replayEvent(t.database.db, head, 'ops')).toEqual({ kind: 'replayed', id: head })
    await expect.poll(() => statuses('blocked'), { timeout: 30_000 }).toEqual({ done: 15 })
    expect(processed.filter((p) => p.startsWith('cus_a'))).toEqual([0, 1, 2, 3, 4].map((n) => `cus_a:${n}`))
  }, 60_000)

  it('on a route: its deliveries keep each key in order while the other routes go at once', async () => {
    const ordered = await startSink(async () => {
      await pause(Math.floor(Math.random() * 30))
      return { status: 200 }
    })
    const unordered = await startSink(() => ({ status: 200 }))
    t.closeAfter(ordered.close, unordered.close)
    const service = await t.start({
      config: config({
        id: 'routed',
        routes: [
          { id: 'ledger', orderingKey: '/data/object/customer', forward: { url: ordered.url } },
          { id: 'audit', forward: { url: unordered.url } },
        ],
      }),
    })
    await deliverInOrder(service.url, 'routed', interleaved(10))
    await expect.poll(() => statuses('routed'), { timeout: 60_000 }).toEqual({ done: 30 })
    expect(unordered.received).toHaveLength(30)
    const arrivals = ordered.received.map(
      (r) => JSON.parse(r.body).data.object as { customer: string; n: number },
    )
    for (const key of KEYS) {
      expect(arrivals.filter((a) => a.customer === key).map((a) => a.n)).toEqual(
        Array.from({ length: 10 }, (_, n) => n),
      )
    }
  }, 90_000)
})
