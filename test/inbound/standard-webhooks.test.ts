import { Webhook as SvixWebhook } from 'svix'
import { describe, expect, it } from 'vitest'
import type { Verification } from '../../src/config/verifier.js'
import { ConfigError } from '../../src/inbound/verifiers/index.js'
import { standardWebhooks } from '../../src/inbound/verifiers/standard-webhooks.js'
import { SPEC_VECTOR, signedHeaders, TEST_SECRET } from '../support/signing.js'

const literal = (reference: string) => reference

function verifierFor(secrets: string[], toleranceSeconds = 300) {
  return standardWebhooks.create(
    { scheme: 'standard-webhooks', secrets, toleranceSeconds },
    { sourceId: 'test', resolveSecret: literal },
  )
}

function verify(
  secrets: string[],
  body: string,
  headers: Record<string, string>,
  now = Date.now(),
): Verification {
  return verifierFor(secrets).verify({ raw: Buffer.from(body), headers, now })
}

function rejectionCode(result: Verification) {
  return result.kind === 'rejected' ? result.code : result.kind
}

describe('standard-webhooks verifier', () => {
  it("accepts the spec's published example vector", () => {
    const result = verify(
      [SPEC_VECTOR.secret],
      SPEC_VECTOR.body,
      {
        'webhook-id': SPEC_VECTOR.id,
        'webhook-timestamp': String(SPEC_VECTOR.timestamp),
        'webhook-signature': SPEC_VECTOR.signature,
      },
      SPEC_VECTOR.timestamp * 1000,
    )
    expect(result).toMatchObject({ kind: 'verified', eventId: SPEC_VECTOR.id, event: { test: 2432232314 } })
  })

  it('accepts a signature made by the svix package under svix-* headers', () => {
    const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_1' } })
    const now = new Date()
    const signature = new SvixWebhook(TEST_SECRET).sign('msg_svix_1', now, body)
    const result = verify([TEST_SECRET], body, {
      'svix-id': 'msg_svix_1',
      'svix-timestamp': String(Math.floor(now.getTime() / 1000)),
      'svix-signature': signature,
    })
    expect(result).toMatchObject({ kind: 'verified', eventId: 'msg_svix_1', eventType: 'invoice.paid' })
  })

  it('accepts a signature made by the standardwebhooks package and keeps the signature headers', () => {
    const body = '{"type":"user.created"}'
    const headers = signedHeaders(body, { id: 'msg_std_1' })
    const result = verify([TEST_SECRET], body, headers)
    expect(result).toMatchObject({
      kind: 'verified',
      keptHeaders: {
        'webhook-id': 'msg_std_1',
        'webhook-signature': headers['webhook-signature'],
        'webhook-timestamp': headers['webhook-timestamp'],
      },
    })
  })

  it('rejects a tampered body, a wrong secret and a signature for another id', () => {
    const body = '{"amount":100}'
    const headers = signedHeaders(body, { id: 'msg_1' })
    expect(rejectionCode(verify([TEST_SECRET], '{"amount":999}', headers))).toBe('invalid_signature')
    const other = 'whsec_b3RoZXItc2VjcmV0LW9mLXR3ZW50eS1mb3VyLWI='
    expect(rejectionCode(verify([other], body, headers))).toBe('invalid_signature')
    expect(rejectionCode(verify([TEST_SECRET], body, { ...headers, 'webhook-id': 'msg_2' }))).toBe(
      'invalid_signature',
    )
  })

  it('verifies against any configured secret, for rotation', () => {
    const old = 'whsec_b2xkLXNlY3JldC1zdGlsbC1hY2NlcHRlZC1kdXJpbmc='
    const body = '{"n":1}'
    expect(verify([TEST_SECRET, old], body, signedHeaders(body, { id: 'a', secret: old })).kind).toBe(
      'verified',
    )
    expect(verify([TEST_SECRET, old], body, signedHeaders(body, { id: 'b' })).kind).toBe('verified')
  })

  it('accepts a header with several signatures when any v1 entry matches, skipping other versions', () => {
    const body = '{"n":2}'
    const headers = signedHeaders(body, { id: 'multi' })
    const fakeV1a = `v1a,${Buffer.alloc(64, 1).toString('base64')}`
    const wrongV1 = `v1,${Buffer.alloc(32, 7).toString('base64')}`
    const combined = `${fakeV1a} ${wrongV1} ${headers['webhook-signature']}`
    expect(verify([TEST_SECRET], body, { ...headers, 'webhook-signature': combined }).kind).toBe('verified')
    expect(
      rejectionCode(
        verify([TEST_SECRET], body, { ...headers, 'webhook-signature': `${fakeV1a} ${wrongV1}` }),
      ),
    ).toBe('invalid_signature')
  })

  it('checks the timestamp against a configurable tolerance, in both directions', () => {
    const body = '{"n":3}'
    const now = Date.now()
    const old = signedHeaders(body, { id: 'old', timestamp: new Date(now - 301_000) })
    const future = signedHeaders(body, { id: 'future', timestamp: new Date(now + 301_000) })
    expect(rejectionCode(verify([TEST_SECRET], body, old, now))).toBe('timestamp_out_of_tolerance')
    expect(rejectionCode(verify([TEST_SECRET], body, future, now))).toBe('timestamp_out_of_tolerance')
    const lenient = verifierFor([TEST_SECRET], 3600)
    expect(lenient.verify({ raw: Buffer.from(body), headers: old, now }).kind).toBe('verified')
    const edge = signedHeaders(body, { id: 'edge', timestamp: new Date(now - 299_000) })
    expect(verify([TEST_SECRET], body, edge, now).kind).toBe('verified')
  })

  it('answers missing and malformed headers with specific codes', () => {
    const body = '{}'
    const headers = signedHeaders(body, { id: 'm' })
    const without = (name: string) =>
      Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name))
    expect(rejectionCode(verify([TEST_SECRET], body, without('webhook-signature')))).toBe(
      'missing_signature_headers',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, without('webhook-timestamp')))).toBe(
      'missing_signature_headers',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, without('webhook-id')))).toBe(
      'missing_signature_headers',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, { ...headers, 'webhook-timestamp': '123abc' }))).toBe(
      'malformed_signature_header',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, { ...headers, 'webhook-signature': 'garbage' }))).toBe(
      'malformed_signature_header',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, { ...headers, 'webhook-id': '  ' }))).toBe(
      'missing_event_id',
    )
    expect(rejectionCode(verify([TEST_SECRET], body, { ...headers, 'webhook-id': 'x'.repeat(300) }))).toBe(
      'invalid_event_id',
    )
  })

  it('rejects a verified body that is not JSON', () => {
    const body = 'not json'
    expect(rejectionCode(verify([TEST_SECRET], body, signedHeaders(body, { id: 'nj' })))).toBe('invalid_json')
  })

  it('fails closed on secrets that are empty, not base64, or too short', () => {
    expect(() => verifierFor(['whsec_'])).toThrow(ConfigError)
    expect(() => verifierFor(['whsec_not*base64'])).toThrow(/not a base64/)
    expect(() => verifierFor(['whsec_c2hvcnQ='])).toThrow(/decodes to 5 bytes/)
  })
})
