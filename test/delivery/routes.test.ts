import { eq, sql } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { operations } from '../../src/db/outbound-schema.js'
import { replayEvent } from '../../src/db/replay.js'
import { eventAttempts, eventRoutes, inboundEvents } from '../../src/db/schema.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { buildConfig } from '../../src/service/config.js'
import { deliverEvent, useDeliveryTest } from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

const t = useDeliveryTest(async (_database) => {
  await t.database.sql`create table route_effects (event_id text not null, route text not null)`
})

function routesConfig(routes: unknown[], source = 'shop'): Config {
  return buildConfig(
    {
      sources: [{ id: source, verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }, routes }],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
    },
    (name) => (name === 'BILLING_AUTHORIZATION' ? 'Bearer billing' : undefined),
  )
}

async function status(id: string) {
  const [row] = await t.database.db
    .select({ status: inboundEvents.status })
    .from(inboundEvents)
    .where(eq(inboundEvents.id, id))
  return row?.status
}

async function routeRows(id: string) {
  return t.database.db
    .select({ routeId: eventRoutes.routeId, status: eventRoutes.status, attempts: eventRoutes.attempts })
    .from(eventRoutes)
    .where(eq(eventRoutes.eventRowId, id))
    .orderBy(eventRoutes.routeId)
}

async function sink(answer: (index: number) => number = () => 200) {
  const started = await startSink((_, index) => ({ status: answer(index) }))
  t.closeAfter(started.close)
  return started
}

const invoicePaid = {
  type: 'invoice.paid',
  data: { object: { livemode: true, customer: 'cus_1' } },
}

describe('routes', () => {
  it('fans one event out to exactly the routes whose filters match, once each', async () => {
    const billing = await sink()
    const testmode = await sink()
    const crm = await sink()
    const everything = await sink()
    const service = await t.start({
      config: routesConfig([
        {
          id: 'billing',
          filter: { types: ['invoice.*'], where: [{ path: '/data/object/livemode', equals: true }] },
          forward: { url: billing.url, headers: { authorization: 'env:BILLING_AUTHORIZATION' } },
        },
        {
          id: 'testmode',
          filter: { where: [{ path: '/data/object/livemode', equals: false }] },
          forward: { url: testmode.url },
        },
        {
          id: 'crm',
          filter: { types: ['customer.*'], where: [{ path: '/data/object/customer', exists: true }] },
          forward: { url: crm.url },
        },
        { id: 'audit', forward: { url: everything.url } },
      ]),
    })
    const id = await deliverEvent(service.url, 'shop', 'evt_fan_1', invoicePaid)
    await expect.poll(() => status(id), { timeout: 15_000 }).toBe('done')
    expect(billing.received).toHaveLength(1)
    expect(everything.received).toHaveLength(1)
    expect(testmode.received).toHaveLength(0)
    expect(crm.received).toHaveLength(0)
    expect(billing.received[0]?.body).toBe(JSON.stringify(invoicePaid))
    expect(billing.received[0]?.headers.authorization).toBe('Bearer billing')
    expect(everything.received[0]?.headers.authorization).toBeUndefined()
    // The provider's signature travels on, so each destination can verify it.
    expect(billing.received[0]?.headers['webhook-signature']).toMatch(/^v1,/)
    expect(await routeRows(id)).toEqual([
      { routeId: 'audit', status: 'done', attempts: 1 },
      { routeId: 'billing', status: 'done', attempts: 1 },
    ])
    const keys = await t.database.db
      .select({ key: operations.operationKey, status: operations.status })
      .from(operations)
      .where(sql`${operations.operationKey} like 'shop:evt_fan_1:%'`)
      .orderBy(operations.operationKey)
    expect(keys).toEqual([
      { key: 'shop:evt_fan_1:route:audit', status: 'completed' },
      { key: 'shop:evt_fan_1:route:billing', status: 'completed' },
    ])
  })

  it('two routes to one destination send two Idempotency-Keys, so neither copy is dropped as a repeat', async () => {
    const shared = await sink()
    const service = await t.start({
      config: routesConfig([
        { id: 'orders', forward: { url: shared.url } },
        { id: 'audit', forward: { url: shared.url } },
      ]),
    })
    const id = await deliverEvent(service.url, 'shop', 'evt_two_routes', invoicePaid)
    await expect.poll(() => status(id), { timeout: 15_000 }).toBe('done')
    const keys = shared.received.map((request) => request.headers['idempotency-key']).sort()
    // A destination that keeps the first answer per key would have dropped the second copy.
    expect(keys).toEqual(['shop:evt_two_routes:audit', 'shop:evt_two_routes:orders'])
    expect(shared.received.map((request) => request.headers['x-hookledger-event-id'])).toEqual([
      'evt_two_routes',
      'evt_two_routes',
    ])
  })

  it('a failing route fails the event; a replay re-sends only that route', async () => {
    let brokenUntilReplay = true
    const healthy = await sink()
    const broken = await sink(() => (brokenUntilReplay ? 500 : 200))
    const code: string[] = []
    const ledgerRoute: EventHandler = async ({ eventId, tx }) => {
      code.push(eventId)
      await tx.execute(sql`insert into route_effects (event_id, route) values (${eventId}, 'ledger')`)
    }
    const service = await t.start({
      config: routesConfig([
        { id: 'healthy', forward: { url: healthy.url } },
        { id: 'broken', forward: { url: broken.url } },
        { id: 'ledger', handler: 'write-ledger' },
      ]),
      handlers: { 'write-ledger': ledgerRoute },
    })
    const id = await deliverEvent(service.url, 'shop', 'evt_fan_2', invoicePaid)
    await expect.poll(() => status(id), { timeout: 15_000 }).toBe('failed')
    expect(healthy.received).toHaveLength(1)
    expect(broken.received).toHaveLength(FAST_WORKER.maxAttempts)
    expect(code).toEqual(['evt_fan_2'])
    expect(await routeRows(id)).toEqual([
      { routeId: 'broken', status: 'failed', attempts: FAST_WORKER.maxAttempts },
      { routeId: 'healthy', status: 'done', attempts: 1 },
      { routeId: 'ledger', status: 'done', attempts: 1 },
    ])
    const [failed] = await t.database.db.select().from(inboundEvents).where(eq(inboundEvents.id, id))
    expect(failed?.lastError).toMatch(/^route 'broken': forward to .* answered 500$/)

    brokenUntilReplay = false
    expect(await replayEvent(t.database.db, id, 'ops')).toEqual({ kind: 'replayed', id })
    await expect.poll(() => status(id), { timeout: 15_000 }).toBe('done')
    expect(healthy.received).toHaveLength(1)
    expect(broken.received).toHaveLength(FAST_WORKER.maxAttempts + 1)
    expect(code).toEqual(['evt_fan_2'])
    expect(await t.database.sql`select * from route_effects where event_id = 'evt_fan_2'`).toHaveLength(1)
    expect((await routeRows(id)).map((r) => [r.routeId, r.status])).toEqual([
      ['broken', 'done'],
      ['healthy', 'done'],
      ['ledger', 'done'],
    ])
  })

  it('an event no route matches is DONE with "no route matched" recorded', async () => {
    const billing = await sink()
    const service = await t.start({
      config: routesConfig([
        { id: 'billing', filter: { types: ['invoice.*'] }, forward: { url: billing.url } },
      ]),
    })
    const id = await deliverEvent(service.url, 'shop', 'evt_fan_3', { type: 'customer.created' })
    await expect.poll(() => status(id), { timeout: 15_000 }).toBe('done')
    expect(billing.received).toHaveLength(0)
    expect(await routeRows(id)).toEqual([])
    const attempts = await t.database.db.select().from(eventAttempts).where(eq(eventAttempts.eventRowId, id))
    expect(attempts).toMatchObject([{ outcome: 'done', responseExcerpt: 'no route matched' }])
  })
})

describe('routes config', () => {
  it('refuses a source with both a handler and routes, duplicate route ids and unknown code handlers', async () => {
    const verify = { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }
    expect(() =>
      buildConfig(
        {
          sources: [
            {
              id: 'shop',
              verify,
              handler: { type: 'forward', url: 'http://127.0.0.1:9/' },
              routes: [{ id: 'a', forward: { url: 'http://127.0.0.1:9/' } }],
            },
          ],
        },
        () => undefined,
      ),
    ).toThrow(/source 'shop': has both "handler" and "routes"/)
    expect(() =>
      routesConfig([
        { id: 'a', forward: { url: 'http://127.0.0.1:9/' } },
        { id: 'a', handler: 'x' },
      ]),
    ).toThrow(/source 'shop': routes\[1\]\.id: route id 'a' is used twice/)
    expect(() =>
      routesConfig([
        { id: 'a', forward: { url: 'http://127.0.0.1:9/', headers: { authorization: 'env:NOPE' } } },
      ]),
    ).toThrow(
      /source 'shop': routes 'a': forward.headers.authorization: environment variable NOPE is not set/,
    )
    await expect(t.start({ config: routesConfig([{ id: 'a', handler: 'missing' }]) })).rejects.toThrow(
      /source 'shop': route 'a': handler 'missing' is not registered in code/,
    )
  })
})
