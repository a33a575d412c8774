import { createHash } from 'node:crypto'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createClaimBatcher, type NewEvent } from '../../src/db/claims.js'
import { operations } from '../../src/db/outbound-schema.js'
import { inboundEvents } from '../../src/db/schema.js'
import { receiveDelivery } from '../../src/inbound/receive.js'
import { signedHeaders } from '../support/signing.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'
import { storedEvents } from '../support/stored-events.js'

// Text PostgreSQL cannot store (NUL, lone surrogates) and JSON too deep to walk: valid JSON and valid
// signatures can carry both. Each must hurt only its own request, with a specific answer.

const AGENT_TOKEN = 'agent-token-for-poisoned-input'
let stack: ApiStack

beforeAll(async () => {
  stack = await createApiStack(testConfig(), { agentToken: AGENT_TOKEN })
})
afterAll(async () => {
  await stack.close()
})

function deliver(body: string, id: string) {
  return stack.app.request('/webhooks/acme', { method: 'POST', body, headers: signedHeaders(body, { id }) })
}

async function rowOf(eventId: string) {
  const [row] = await storedEvents(stack.database.db, eq(inboundEvents.eventId, eventId))
  return row
}

describe('inbound: text Postgres cannot store, in a signed delivery', () => {
  it('a NUL in a signed type is stored as U+FFFD with the exact bytes, and its batch neighbours commit', async () => {
    // The body's JSON escape `\u0000` parses to a NUL in `type`, which the event_type column refuses.
    const poisoned = '{"type":"a\\u0000b"}'
    const answers = await Promise.all([
      deliver(poisoned, 'evt_nul'),
      ...Array.from({ length: 20 }, (_, i) => deliver(`{"type":"ok","n":${i}}`, `evt_neighbour_${i}`)),
    ])
    expect(answers.map((answer) => answer.status)).toEqual(Array(21).fill(200))
    const row = await rowOf('evt_nul')
    expect(row?.eventType).toBe('a\ufffdb')
    expect(row?.body.toString('utf8')).toBe(poisoned)
    for (let i = 0; i < 20; i += 1) expect(await rowOf(`evt_neighbour_${i}`)).toBeDefined()
  })

  it('a lone surrogate in a signed type is stored as U+FFFD', async () => {
    const body = '{"type":"\\ud800x"}'
    expect((await deliver(body, 'evt_surrogate')).status).toBe(200)
    expect((await rowOf('evt_surrogate'))?.eventType).toBe('\ufffdx')
  })

  it('a header value with NUL or a lone surrogate is stored as U+FFFD in the jsonb headers', async () => {
    const body = '{"type":"headers"}'
    const source = testConfig().sources.get('acme')
    if (source === undefined) throw new Error('test config lost its source')
    const outcome = await receiveDelivery(
      { claims: createClaimBatcher(stack.database.sql) },
      source,
      Buffer.from(body),
      {
        ...signedHeaders(body, { id: 'evt_header_nul' }),
        'user-agent': 'agent\u0000\ud800',
      },
    )
    expect(outcome.kind).toBe('accepted')
    expect((await rowOf('evt_header_nul'))?.headers['user-agent']).toBe('agent\ufffd\ufffd')
  })

  it('when a batch statement fails on a value, the other deliveries in it still commit', async () => {
    // Straight to the batcher, past receive's cleaning: stands for a bad value no check foresaw.
    const event = (eventId: string, eventType: string): NewEvent => ({
      source: 'acme',
      eventId,
      eventType,
      payloadHash: createHash('sha256').update(eventId).digest('hex'),
      body: Buffer.from(eventId),
      headers: {},
    })
    const claims = createClaimBatcher(stack.database.sql)
    const settled = await Promise.allSettled([
      claims.claim(event('evt_batch_bad', 'bad\u0000type')),
      ...Array.from({ length: 9 }, (_, i) => claims.claim(event(`evt_batch_ok_${i}`, 'ok'))),
    ])
    expect(settled[0]?.status).toBe('rejected')
    expect(settled.slice(1).map((result) => result.status)).toEqual(Array(9).fill('fulfilled'))
    expect(await rowOf('evt_batch_bad')).toBeUndefined()
    for (let i = 0; i < 9; i += 1) expect(await rowOf(`evt_batch_ok_${i}`)).toBeDefined()
  })
})

describe('/v1/operations: text Postgres cannot store, and JSON nested too deep', () => {
  const headers = { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' }
  const claim = (body: string) => stack.app.request('/v1/operations/claim', { method: 'POST', headers, body })
  const claimText = (key: string, argsJson: string) =>
    `{"key":${JSON.stringify(key)},"tool":"demo.tool","effect":"idempotent","args":${argsJson}}`

  async function expectError(response: Response, status: number, code: string) {
    expect(response.status).toBe(status)
    expect(await response.json()).toMatchObject({ error: { code, message: expect.any(String) } })
  }

  it('a key with NUL → 400 unstorable_text, nothing written', async () => {
    await expectError(await claim(claimText('key\u0000nul', '{}')), 400, 'unstorable_text')
    expect(await stack.database.db.select().from(operations)).toEqual([])
  })

  it('args with a lone surrogate, as a value or as an object key → 400 unstorable_text', async () => {
    await expectError(await claim(claimText('key-surrogate', '{"name":"\\ud800"}')), 400, 'unstorable_text')
    await expectError(await claim(claimText('key-surrogate', '{"\\udc00":1}')), 400, 'unstorable_text')
    await expectError(await claim(claimText('key-nul-arg', '["\\u0000"]')), 400, 'unstorable_text')
    expect(await stack.database.db.select().from(operations)).toEqual([])
  })

  it('args nested 5,000 levels → 400 json_too_deep (not a RangeError and a 500)', async () => {
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`
    await expectError(await claim(claimText('key-deep', deep)), 400, 'json_too_deep')
    expect(await stack.database.db.select().from(operations)).toEqual([])
  })

  it('GET /v1/operations/%00 → 400 invalid_key; a storable unknown key is still 404', async () => {
    await expectError(await stack.app.request('/v1/operations/%00', { headers }), 400, 'invalid_key')
    await expectError(
      await stack.app.request('/v1/operations/a%00b/outcome', { method: 'POST', headers, body: '{}' }),
      400,
      'invalid_key',
    )
    await expectError(
      await stack.app.request('/v1/operations/no-such-key', { headers }),
      404,
      'operation_not_found',
    )
  })

  it('a storable claim still executes', async () => {
    const response = await claim(
      claimText('key-fine', '{"text":"caf\\u00e9 \\ud83d\\ude00","depth":[[[1]]]}'),
    )
    expect(response.status).toBe(200)
    expect(await response.json()).toMatchObject({ decision: 'execute' })
  })
})
