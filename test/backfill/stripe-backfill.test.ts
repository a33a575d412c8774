import { and, eq, sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BackfillError } from '../../src/backfill/errors.js'
import { runBackfillPass } from '../../src/backfill/pass.js'
import type { Config, Source } from '../../src/config/config.js'
import {
  backfillCursors,
  inboundConflicts,
  inboundEventPayloads,
  inboundEvents,
} from '../../src/db/schema.js'
import { createLogger } from '../../src/logger.js'
import { buildConfig } from '../../src/service/config.js'
import { signDelivery } from '../../src/testing.js'
import {
  type MockStripe,
  type MockStripeEvent,
  startMockStripe,
  stripeWebhookBody,
} from '../support/mock-stripe.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { startSink } from '../support/sink.js'

// Stripe events whose webhooks never arrived are fetched back from a local Stripe API ("List all
// events") and claimed through the webhook path's claim; webhook and backfill meet on the event id.

const API_KEY = 'sk_test_backfill_mock_key_000'
const WEBHOOK_SECRET = 'whsec_backfill_test_secret'
const ADMIN_TOKEN = 'admin-token-for-backfill-tests'
const logger = createLogger('silent')

// The service's loop reads its own API, so its passes never take the answers a test scripts.
let loopApi: MockStripe
let stripe: MockStripe
let sink: Awaited<ReturnType<typeof startSink>>
let running: TestService
let config: Config

function buildSources(overrides: Record<string, Record<string, unknown>> = {}, key = API_KEY): Config {
  const source = (id: string, backfill: Record<string, unknown>, api = stripe) => ({
    id,
    verify: { scheme: 'stripe', secrets: [WEBHOOK_SECRET] },
    handler: { type: 'forward', url: sink.url },
    backfill: {
      credential: 'env:STRIPE_API_KEY',
      apiBaseUrl: api.baseUrl,
      pageSize: 2,
      ...backfill,
      ...overrides[id],
    },
  })
  return buildConfig(
    {
      sources: [
        // Run by the service's loop every second.
        source('stripe', { intervalSeconds: 1 }, loopApi),
        // Run by hand in these tests: one page per pass, so a sweep spans passes.
        source('manual', { enabled: false, maxPagesPerPass: 1, onlyFailedDeliveries: false }),
        // The default: only events some endpoint has not received (delivery_success=false).
        source('filtered', {
          enabled: false,
          eventTypes: ['payment_intent.succeeded', 'charge.refunded'],
        }),
        source('impatient', { enabled: false, maxWaitSeconds: 2, onlyFailedDeliveries: false }),
      ],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
    },
    (name) => (name === 'STRIPE_API_KEY' ? key : undefined),
  )
}

const sourceOf = (id: string, from: Config = config): Source => {
  const source = from.sources.get(id)
  if (source === undefined) throw new Error(`no source ${id}`)
  return source
}

const pass = (id: string, options: { since?: Date } = {}, from: Config = config) =>
  runBackfillPass({ sql: running.database.sql, logger }, sourceOf(id, from), options)

const nowSeconds = () => Math.floor(Date.now() / 1000)

function addEvents(prefix: string, count: number, createdFrom: number, api = stripe): MockStripeEvent[] {
  return Array.from({ length: count }, (_, i) =>
    api.addEvent({
      id: `evt_${prefix}_${i + 1}`,
      type: 'payment_intent.succeeded',
      created: createdFrom + i * 10,
    }),
  )
}

async function sendWebhook(source: string, event: MockStripeEvent) {
  const body = stripeWebhookBody(event)
  const response = await fetch(`${running.url}/webhooks/${source}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...signDelivery('stripe', WEBHOOK_SECRET, body) },
    body,
  })
  return { status: response.status, body: (await response.json()) as { status?: string; id?: string } }
}

const rowsOf = (source: string) =>
  running.database.db
    .select({
      id: inboundEvents.id,
      eventId: inboundEvents.eventId,
      status: inboundEvents.status,
      origin: inboundEvents.origin,
      headers: inboundEvents.headers,
      body: inboundEventPayloads.body,
    })
    .from(inboundEvents)
    .innerJoin(inboundEventPayloads, eq(inboundEventPayloads.eventRowId, inboundEvents.id))
    .where(eq(inboundEvents.source, source))

const forwardsOf = (eventId: string) =>
  sink.received.filter((request) => request.headers['x-hookledger-event-id'] === eventId)

let early: MockStripeEvent[]

beforeAll(async () => {
  stripe = await startMockStripe(API_KEY)
  loopApi = await startMockStripe(API_KEY)
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  // Five events of the last ten minutes; the first two also reach the webhook endpoint.
  early = addEvents('loop', 5, nowSeconds() - 600, loopApi)
  // Stripe records the webhooks of the last three as failed; the first two were delivered.
  for (const event of early.slice(2)) loopApi.undelivered.add(event.id)
  config = buildSources()
  running = await startTestService({ config, env: { ADMIN_TOKEN } })
})

afterAll(async () => {
  await running?.close()
  await sink?.close()
  await stripe?.close()
  await loopApi?.close()
})

describe('the service loop', () => {
  it('claims the events whose webhooks were missed, and each is processed to DONE once', async () => {
    for (const event of early.slice(0, 2)) expect((await sendWebhook('stripe', event)).status).toBe(200)

    await expect
      .poll(async () => (await rowsOf('stripe')).filter((row) => row.status === 'done').length, {
        timeout: 20_000,
      })
      .toBe(5)
    const rows = await rowsOf('stripe')
    expect(rows.map((row) => row.eventId).sort()).toEqual(early.map((event) => event.id).sort())
    for (const event of early.slice(2)) {
      const row = rows.find((candidate) => candidate.eventId === event.id)
      expect(row?.origin).toBe('backfill')
      expect(row?.headers).toEqual({ 'content-type': 'application/json', 'x-hookledger-origin': 'backfill' })
      expect(JSON.parse(row?.body.toString('utf8') ?? '')).toEqual(event)
    }
    // Five events over pages of two: the list was paged with starting_after.
    expect(loopApi.requests.some((request) => request.query.has('starting_after'))).toBe(true)
    for (const request of loopApi.requests) expect(request.headers.authorization).toBe(`Bearer ${API_KEY}`)

    for (const event of early) expect(forwardsOf(event.id)).toHaveLength(1)
    const backfilled = forwardsOf(early[2]?.id ?? '')[0]
    expect(backfilled?.headers['x-hookledger-origin']).toBe('backfill')
    expect(backfilled?.headers['stripe-signature']).toBeUndefined()

    const metrics = await (await fetch(`${running.url}/metrics`)).text()
    const claimed = /hookledger_backfill_items_total\{source="stripe",outcome="claimed"\} (\d+)/.exec(metrics)
    expect(Number(claimed?.[1])).toBeGreaterThanOrEqual(3)
    expect(metrics).toMatch(/hookledger_backfill_passes_total\{source="stripe",result="complete"\} [1-9]/)
  })

  it('answers a webhook arriving after the backfill as a duplicate of the backfilled row', async () => {
    const event = early[3] as MockStripeEvent
    const [row] = (await rowsOf('stripe')).filter((candidate) => candidate.eventId === event.id)
    const answer = await sendWebhook('stripe', event)
    expect(answer).toEqual({ status: 200, body: { status: 'duplicate', id: row?.id } })
    const conflicts = await running.database.db
      .select()
      .from(inboundConflicts)
      .where(eq(inboundConflicts.source, 'stripe'))
    expect(conflicts).toHaveLength(0)
    // Nothing runs again for it.
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(forwardsOf(event.id)).toHaveLength(1)
  })

  it('says on the admin event page that the row came from backfill, not a signature', async () => {
    const login = await fetch(`${running.url}/admin/login`, {
      method: 'POST',
      body: new URLSearchParams({ name: 'ana', token: ADMIN_TOKEN }),
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: running.url },
      redirect: 'manual',
    })
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
    const rows = await rowsOf('stripe')
    const page = async (eventId: string) => {
      const id = rows.find((row) => row.eventId === eventId)?.id ?? ''
      return (await fetch(`${running.url}/admin/events/${id}`, { headers: { cookie } })).text()
    }
    const backfilled = await page(early[2]?.id ?? '')
    expect(backfilled).toContain('Fetched by backfill')
    expect(backfilled).toContain('the provider&#39;s API (backfill), not a signature')
    const signed = await page(early[0]?.id ?? '')
    // The first two were sent as webhooks; one of them may still have lost the race to the first pass.
    const webhookRows = rows.filter((row) => row.origin === 'webhook')
    if (webhookRows.some((row) => row.eventId === early[0]?.id)) {
      expect(signed).toContain('the delivery&#39;s signature (webhook)')
      expect(signed).not.toContain('Fetched by backfill')
    }
  })
})

describe('a pass by hand', () => {
  it('finds an event whose webhook came first already in the ledger: a duplicate, not a second row', async () => {
    const [event] = addEvents('first', 1, nowSeconds() - 30)
    if (event === undefined) throw new Error('no event')
    expect((await sendWebhook('manual', event)).body.status).toBe('accepted')
    const report = await pass('manual', { since: new Date(event.created * 1000) })
    expect(report.error).toBeUndefined()
    expect(report.claimed).not.toContain(event.id)
    expect(report.duplicates).toBeGreaterThanOrEqual(1)
    const rows = (await rowsOf('manual')).filter((row) => row.eventId === event.id)
    expect(rows).toHaveLength(1)
    expect(rows[0]?.origin).toBe('webhook')
  })

  it('resumes a sweep where a bounded pass stopped, then continues from the completed sweep', async () => {
    addEvents('resume', 5, nowSeconds() - 500)
    const before = stripe.requests.length
    const first = await pass('manual')
    expect(first).toMatchObject({ pages: 1, complete: false })
    const [cursor] = await running.database.db
      .select()
      .from(backfillCursors)
      .where(eq(backfillCursors.source, 'manual'))
    // The second event of the first page, newest first: where the next pass must continue.
    const newestFirst = [...stripe.events].sort((a, b) => b.created - a.created)
    expect(cursor?.sweepResume).toBe(newestFirst[1]?.id)
    expect(cursor?.watermark).toBeNull()

    const sweepSince = stripe.requests[before]?.query.get('created[gte]')
    const reports = [first]
    for (let i = 0; i < 10 && reports.at(-1)?.complete !== true; i++) {
      const previousResume = (
        await running.database.db.select().from(backfillCursors).where(eq(backfillCursors.source, 'manual'))
      )[0]?.sweepResume
      const next = await pass('manual')
      const request = stripe.requests.at(-1)
      expect(request?.query.get('starting_after')).toBe(previousResume)
      expect(request?.query.get('created[gte]')).toBe(sweepSince)
      expect(next.resumedAfter).toBe(previousResume)
      reports.push(next)
    }
    expect(reports.at(-1)?.complete).toBe(true)

    // Every event in the mock is in the ledger for this source exactly once.
    const rows = await rowsOf('manual')
    expect(rows.map((row) => row.eventId).sort()).toEqual(stripe.events.map((event) => event.id).sort())
    const [done] = await running.database.db
      .select()
      .from(backfillCursors)
      .where(eq(backfillCursors.source, 'manual'))
    expect(done?.watermark).not.toBeNull()
    expect(done?.sweepResume).toBeNull()

    // The next sweep starts from the completed one's start, less the five-minute overlap.
    await pass('manual')
    const request = stripe.requests.at(-1)
    expect(request?.query.get('starting_after')).toBeNull()
    expect(Number(request?.query.get('created[gte]'))).toBe(
      Math.floor(((done?.watermark?.getTime() ?? 0) - 5 * 60_000) / 1000),
    )
  })

  it('asks only for failed deliveries of the subscribed types when so configured', async () => {
    const created = nowSeconds() - 20
    const wanted = stripe.addEvent({ id: 'evt_filter_wanted', type: 'charge.refunded', created })
    stripe.addEvent({ id: 'evt_filter_other_type', type: 'customer.created', created })
    stripe.addEvent({ id: 'evt_filter_delivered', type: 'charge.refunded', created })
    stripe.undelivered.add(wanted.id)
    stripe.undelivered.add('evt_filter_other_type')
    const report = await pass('filtered', { since: new Date(created * 1000) })
    const request = stripe.requests.at(-1)
    expect(request?.query.get('delivery_success')).toBe('false')
    expect(request?.query.getAll('types[]')).toEqual(['payment_intent.succeeded', 'charge.refunded'])
    expect(report.claimed).toEqual([wanted.id])
  })
})

describe('what the API answers', () => {
  it('waits out a 429 for its Retry-After and retries 5xx, then completes', async () => {
    stripe.script.push(
      {
        status: 429,
        headers: { 'retry-after': '1' },
        body: { error: { type: 'rate_limit_error', message: 'Too many requests' } },
      },
      { status: 500, body: { error: { type: 'api_error', message: 'boom' } } },
      { status: 503, body: { error: { type: 'api_error', message: 'unavailable' } } },
    )
    const before = stripe.requests.length
    const report = await pass('impatient', { since: new Date((nowSeconds() - 60) * 1000) })
    expect(report.error).toBeUndefined()
    expect(report.complete).toBe(true)
    expect(stripe.requests.length - before).toBeGreaterThanOrEqual(4)
  })

  it('stops with rate_limited when the provider asks for a longer wait than maxWaitSeconds', async () => {
    stripe.script.push({
      status: 429,
      headers: { 'retry-after': '3600' },
      body: { error: { message: 'slow down' } },
    })
    const report = await pass('impatient')
    expect(report.error?.code).toBe('rate_limited')
    expect(report.error?.message).toMatch(/asks to wait 3600 s, longer than backfill.maxWaitSeconds \(2 s\)/)
  })

  it('stops with provider_unavailable when 5xx outlast the retries', async () => {
    for (let i = 0; i < 4; i++)
      stripe.script.push({ status: 502, body: { error: { message: 'bad gateway' } } })
    const report = await pass('impatient')
    expect(report.error?.code).toBe('provider_unavailable')
    expect(report.error?.message).toMatch(/Stripe API answered 502 to GET \/v1\/events, 4 times/)
  })

  it('stops with unauthorized on a 401, names the variable, records the error and keeps the cursor', async () => {
    const [before] = await running.database.db
      .select()
      .from(backfillCursors)
      .where(eq(backfillCursors.source, 'manual'))
    const wrongKey = buildSources({}, 'sk_test_revoked_key')
    const report = await pass('manual', {}, wrongKey)
    expect(report.error?.code).toBe('unauthorized')
    expect(report.error?.message).toMatch(
      /Stripe API rejected the key in STRIPE_API_KEY \(401: Invalid API Key provided/,
    )
    expect(report.claimed).toEqual([])
    const [after] = await running.database.db
      .select()
      .from(backfillCursors)
      .where(eq(backfillCursors.source, 'manual'))
    expect(after?.watermark).toEqual(before?.watermark)
    expect(after?.lastError).toMatch(/^unauthorized: /)
    expect(after?.leaseUntil).toBeNull()
  })

  it('drops an unfinished sweep whose resume point Stripe refuses, so later passes are not stuck on it', async () => {
    await running.database.sql`
      update backfill_cursors
      set sweep_since = now() - interval '1 hour', sweep_started_at = now(), sweep_resume = 'evt_aged_out'
      where source = 'manual'`
    const refused = await pass('manual')
    expect(refused.error?.code).toBe('request_rejected')
    expect(refused.error?.message).toMatch(
      /\(400: No such event: 'evt_aged_out'\); the unfinished sweep was dropped/,
    )
    const next = await pass('manual')
    expect(next.error).toBeUndefined()
    expect(next.resumedAfter).toBeNull()
    expect(stripe.requests.at(-1)?.query.get('starting_after')).toBeNull()
  })

  it('refuses a list that is not the documented list object', async () => {
    stripe.script.push({ status: 200, body: { data: 'nope' } })
    const report = await pass('impatient')
    expect(report.error?.code).toBe('invalid_response')
  })
})

describe('one pass at a time', () => {
  it('lets one of two concurrent passes run; the other learns that a pass is running', async () => {
    // The first request is held up for a second, so the two passes surely overlap.
    stripe.script.push({ status: 429, headers: { 'retry-after': '1' }, body: { error: { message: 'wait' } } })
    const outcomes = await Promise.allSettled([pass('impatient'), pass('impatient')])
    const refused = outcomes.filter((outcome) => outcome.status === 'rejected')
    expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1)
    expect(refused).toHaveLength(1)
    const reason = (refused[0] as PromiseRejectedResult).reason as BackfillError
    expect(reason).toBeInstanceOf(BackfillError)
    expect(reason.code).toBe('pass_running')
    const [lease] = await running.database.db
      .select({ leaseUntil: backfillCursors.leaseUntil })
      .from(backfillCursors)
      .where(and(eq(backfillCursors.source, 'impatient'), sql`true`))
    expect(lease?.leaseUntil).toBeNull()
  })
})
