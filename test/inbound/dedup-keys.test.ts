import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/config/config.js'
import { checkDedupKeys } from '../../src/inbound/dedup-key-drift.js'
import { createLogger } from '../../src/logger.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase } from '../support/database.js'
import { startTestService } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { type ApiStack, createApiStack } from '../support/stack.js'

// Adyen identifies a notification by eventCode + pspReference (an AUTHORISATION and a CAPTURE of one
// payment share the pspReference); the delivery id alone is not the event.
const ADYEN_KEY = {
  parts: [
    { pointer: '/notificationItems/0/NotificationRequestItem/eventCode' },
    { pointer: '/notificationItems/0/NotificationRequestItem/pspReference' },
  ],
}

function source(id: string, dedupKey: unknown, extra: Record<string, unknown> = {}) {
  return {
    id,
    verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
    handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
    ...(dedupKey === undefined ? {} : { dedupKey }),
    ...extra,
  }
}

// A header no scheme here signs: whoever holds one delivery can send it again with another value.
const IDEM_KEY = { parts: [{ header: 'x-idem' }] }

const configOf = (...sources: unknown[]) => buildConfig({ sources }, () => undefined)

let stack: ApiStack

beforeAll(async () => {
  stack = await createApiStack(
    configOf(
      source('adyen', ADYEN_KEY),
      source('scoped', { scope: 'event_type' }),
      source('headers', { parts: [{ header: 'x-shop-domain', trusted: true }, { pointer: '/order/id' }] }),
      source('idem-body', IDEM_KEY, { dedupOnBody: true }),
      source('idem-trusted', { parts: [{ header: 'x-idem', trusted: true }] }),
    ),
  )
})
afterAll(async () => {
  await stack.close()
})

const adyen = (eventCode: unknown, pspReference: unknown) =>
  JSON.stringify({
    live: 'false',
    notificationItems: [{ NotificationRequestItem: { eventCode, pspReference, success: 'true' } }],
  })

async function post(
  sourceId: string,
  body: string,
  deliveryId: string,
  headers: Record<string, string> = {},
) {
  const response = await stack.app.request(`/webhooks/${sourceId}`, {
    method: 'POST',
    body,
    headers: { ...signedHeaders(body, { id: deliveryId }), ...headers },
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

async function eventIds(sourceId: string): Promise<string[]> {
  const rows = await stack.database.sql<Array<{ event_id: string }>>`
    select event_id from inbound_events where source = ${sourceId} order by received_at, event_id`
  return rows.map((row) => row.event_id)
}

describe('composite dedup keys', () => {
  it('eventCode + pspReference: a resend under a new delivery id is a duplicate, a CAPTURE of the same payment is new', async () => {
    const authorisation = adyen('AUTHORISATION', '8535296650153317')
    expect(await post('adyen', authorisation, 'delivery_1')).toMatchObject({
      status: 200,
      body: { status: 'accepted' },
    })
    expect(await post('adyen', authorisation, 'delivery_2')).toMatchObject({
      status: 200,
      body: { status: 'duplicate' },
    })
    expect(await post('adyen', adyen('CAPTURE', '8535296650153317'), 'delivery_3')).toMatchObject({
      status: 200,
      body: { status: 'accepted' },
    })
    expect(await eventIds('adyen')).toEqual([
      'dk1:AUTHORISATION:8535296650153317',
      'dk1:CAPTURE:8535296650153317',
    ])
  })

  it('any part missing, empty or not a scalar: 400 missing_event_id and nothing is written', async () => {
    const before = await eventIds('adyen')
    for (const [index, [code, psp]] of [
      [undefined, 'psp_1'],
      ['AUTHORISATION', ''],
      ['AUTHORISATION', '   '],
      ['AUTHORISATION', null],
      ['AUTHORISATION', { nested: true }],
    ].entries()) {
      const answer = await post('adyen', adyen(code, psp), `missing_${index}`)
      expect(answer, JSON.stringify([code, psp])).toMatchObject({
        status: 400,
        body: { error: { code: 'missing_event_id' } },
      })
    }
    const header = await post('headers', JSON.stringify({ order: { id: 7 } }), 'no_header')
    expect(header).toMatchObject({ status: 400, body: { error: { code: 'missing_event_id' } } })
    const noType = await post('scoped', JSON.stringify({ data: 1 }), 'untyped')
    expect(noType).toMatchObject({ status: 400, body: { error: { code: 'missing_event_id' } } })
    expect(await eventIds('adyen')).toEqual(before)
    expect(await eventIds('headers')).toEqual([])
    expect(await eventIds('scoped')).toEqual([])
  })

  it('parts are encoded, so a separator inside a part cannot make two keys equal', async () => {
    expect((await post('adyen', adyen('A:B', 'C'), 'sep_1')).body.status).toBe('accepted')
    expect((await post('adyen', adyen('A', 'B:C'), 'sep_2')).body.status).toBe('accepted')
    expect(await eventIds('adyen')).toEqual(expect.arrayContaining(['dk1:A%3AB:C', 'dk1:A:B%3AC']))
  })

  it('scoped by event type: one provider id under two types is two events; headers and integers are parts', async () => {
    const paid = JSON.stringify({ type: 'order.paid', n: 1 })
    const shipped = JSON.stringify({ type: 'order.shipped', n: 1 })
    expect((await post('scoped', paid, 'same_id')).body.status).toBe('accepted')
    expect((await post('scoped', shipped, 'same_id')).body.status).toBe('accepted')
    expect((await post('scoped', paid, 'same_id')).body.status).toBe('duplicate')
    expect(await eventIds('scoped')).toEqual(['dk1:order.paid:same_id', 'dk1:order.shipped:same_id'])
    const order = JSON.stringify({ order: { id: 42 } })
    expect((await post('headers', order, 'h1', { 'x-shop-domain': 'a.example' })).body.status).toBe(
      'accepted',
    )
    expect((await post('headers', order, 'h2', { 'x-shop-domain': 'b.example' })).body.status).toBe(
      'accepted',
    )
    expect((await post('headers', order, 'h3', { 'x-shop-domain': 'a.example' })).body.status).toBe(
      'duplicate',
    )
  })
})

describe('dedup keys from unsigned parts', () => {
  it('refuses at start-up a header the scheme does not sign, saying which part, why and how to fix it', () => {
    const refused = () => configOf(source('idem', IDEM_KEY))
    expect(refused).toThrow(ConfigError)
    expect(refused).toThrow(
      /source 'idem': dedupKey\.parts\[0\] \(header x-idem\) is not signed: the standard-webhooks scheme signs the webhook-id and webhook-timestamp headers and the body, so anyone holding one delivery can resend it with another x-idem/,
    )
    expect(refused).toThrow(/"dedupOnBody": true .* \{"header": "x-idem", "trusted": true\}/)
    // Per scheme: Stripe signs no header, GitHub none either (but dedups on the body by default).
    const stripe = { id: 'pay', verify: { scheme: 'stripe', secrets: ['whsec_x'] } }
    expect(() => configOf({ ...stripe, dedupKey: { parts: [{ header: 'stripe-account' }] } })).toThrow(
      /the stripe scheme signs the timestamp inside stripe-signature and the body/,
    )
    const github = { id: 'gh', verify: { scheme: 'github', secrets: ['s'] } }
    expect(() => configOf({ ...github, dedupKey: IDEM_KEY, dedupOnBody: false })).toThrow(
      /dedupKey\.parts\[0\] \(header x-idem\) is not signed: the github scheme signs the body only/,
    )
    // The event type is a part too when the key is scoped by it: GitHub reads it from a header.
    expect(() => configOf({ ...github, dedupKey: { scope: 'event_type' }, dedupOnBody: false })).toThrow(
      /dedupKey\.scope "event_type" reads the event type from the x-github-event header, which is not signed/,
    )
    configOf({ ...github, dedupKey: { scope: 'event_type' } })
    configOf(source('typed', { scope: 'event_type' }))
    // Signed parts, a trusted header, or a source that also dedups on the body start.
    configOf(source('signed', { parts: [{ header: 'webhook-id' }, { pointer: '/order/id' }] }))
    configOf({ ...github, dedupKey: IDEM_KEY })
    configOf({
      ...stripe,
      dedupKey: { parts: [{ header: 'stripe-account', trusted: true }, { pointer: '/id' }] },
    })
  })

  it('a captured delivery resent under fresh header values is a duplicate with dedupOnBody', async () => {
    const body = JSON.stringify({ type: 'refund.requested', amount: 4200 })
    const answers = []
    for (const idem of ['idem_1', 'idem_2', 'idem_3']) {
      const response = await stack.app.request('/webhooks/idem-body', {
        method: 'POST',
        body,
        headers: { ...signedHeaders(body, { id: 'msg_captured' }), 'x-idem': idem },
      })
      answers.push(((await response.json()) as { status: string }).status)
    }
    expect(answers).toEqual(['accepted', 'duplicate', 'duplicate'])
    expect(await eventIds('idem-body')).toEqual(['dk1:idem_1'])
  })

  it('a trusted header keys events by its value; the same value again is a duplicate', async () => {
    const body = JSON.stringify({ type: 'refund.requested', amount: 4200 })
    const statuses = []
    for (const [id, idem] of [
      ['m1', 'a'],
      ['m2', 'a'],
      ['m3', 'b'],
    ] as const) {
      statuses.push((await post('idem-trusted', body, id, { 'x-idem': idem })).body.status)
    }
    expect(statuses).toEqual(['accepted', 'duplicate', 'accepted'])
  })

  it('marking a part trusted does not change the recorded definition', async () => {
    const database = await createTestDatabase()
    const logger = createLogger('silent')
    try {
      const plain = source('vouched', IDEM_KEY, { dedupOnBody: true })
      await checkDedupKeys(database.sql, configOf(plain), logger)
      await database.sql`
        insert into inbound_events (source, event_id, payload_hash, headers)
        values ('vouched', 'dk1:a', 'h', '{}'::jsonb)`
      const trusted = source('vouched', { parts: [{ header: 'x-idem', trusted: true }] })
      await checkDedupKeys(database.sql, configOf(trusted), logger)
    } finally {
      await database.drop()
    }
  })
})

describe('a changed key definition at start-up', () => {
  const logger = createLogger('silent')

  it('refuses a changed definition under the same version, records a raised one, and never goes back', async () => {
    const database = await createTestDatabase()
    try {
      // Events received under the provider's event id (as every source before dedup keys).
      await checkDedupKeys(database.sql, configOf(source('adyen', undefined)), logger)
      await database.sql`
        insert into inbound_events (source, event_id, payload_hash, headers)
        values ('adyen', 'evt_1', 'h', '{}'::jsonb)`
      const changed = checkDedupKeys(database.sql, configOf(source('adyen', ADYEN_KEY)), logger)
      await expect(changed).rejects.toThrow(ConfigError)
      await expect(changed).rejects.toThrow(/source 'adyen': dedupKey differs .* set dedupKey.version to 2/)

      await checkDedupKeys(database.sql, configOf(source('adyen', { ...ADYEN_KEY, version: 2 })), logger)
      const [recorded] = await database.sql`select version from source_dedup_keys where source = 'adyen'`
      expect(recorded?.version).toBe(2)
      // The same definition again starts; the old one, or another one under version 2, does not.
      await checkDedupKeys(database.sql, configOf(source('adyen', { ...ADYEN_KEY, version: 2 })), logger)
      await expect(
        checkDedupKeys(database.sql, configOf(source('adyen', undefined)), logger),
      ).rejects.toThrow(/dedupKey differs/)
      const scoped = { ...ADYEN_KEY, scope: 'event_type', version: 2 }
      await expect(checkDedupKeys(database.sql, configOf(source('adyen', scoped)), logger)).rejects.toThrow(
        /set dedupKey.version to 3/,
      )
      await expect(
        checkDedupKeys(database.sql, configOf(source('adyen', { ...ADYEN_KEY, version: 1 })), logger),
      ).rejects.toThrow(/dedupKey.version 1 is lower than the version 2 .* versions only go up/)
    } finally {
      await database.drop()
    }
  })

  it('a source with no events yet takes any definition; the service refuses to start on a change', async () => {
    const database = await createTestDatabase()
    try {
      await checkDedupKeys(database.sql, configOf(source('fresh', ADYEN_KEY)), logger)
      await checkDedupKeys(database.sql, configOf(source('fresh', { scope: 'event_type' })), logger)
      await database.sql`
        insert into inbound_events (source, event_id, payload_hash, headers)
        values ('fresh', 'dk1:t:evt_1', 'h', '{}'::jsonb)`
      await expect(
        startTestService({ database, config: configOf(source('fresh', ADYEN_KEY)) }),
      ).rejects.toThrow(/source 'fresh': dedupKey differs/)
    } finally {
      await database.drop()
    }
  })
})
