import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/config/config.js'
import { verifyConfigSchema } from '../../src/config/verify.js'
import {
  createVerifier,
  providerRetryHorizonSeconds,
  SCHEME_NAMES,
  SCHEMES,
} from '../../src/inbound/verifiers/index.js'
import { buildConfig } from '../../src/service/config.js'
import { generateStandardWebhooksKeyPair, signDelivery } from '../../src/testing.js'

// Verification fails closed: a config that cannot verify what it claims never starts, naming the
// source; a delivery without an event id is refused, never keyed by an empty string.

function configWith(verify: unknown, env: Record<string, string> = {}) {
  return () => buildConfig({ sources: [{ id: 'shop-eu', verify }] }, (name) => env[name])
}

describe('start-up refuses a verify block that would not verify', () => {
  it('an unknown scheme, naming the source', () => {
    expect(configWith({ scheme: 'none', secrets: ['x'] })).toThrow(ConfigError)
    expect(configWith({ scheme: 'none', secrets: ['x'] })).toThrow(/source 'shop-eu': verify/)
  })

  for (const scheme of SCHEME_NAMES) {
    it(`${scheme}: no secrets, an empty secret, or an unset env secret`, () => {
      const extra = scheme === 'square' ? { notificationUrl: 'https://h.example.com/webhooks/sq' } : {}
      const generic = scheme === 'hmac' ? { header: 'X-Sig', eventId: { header: 'X-Id' } } : {}
      const base = { scheme, ...extra, ...generic }
      expect(configWith({ ...base, secrets: [] })).toThrow(
        /source 'shop-eu': verify.secrets: needs at least one/,
      )
      expect(configWith({ ...base, secrets: ['env:EMPTY'] }, { EMPTY: '' })).toThrow(
        /source 'shop-eu': verify.secrets\[0\]: (the secret is empty|decodes to 0 bytes|not a base64)/,
      )
      expect(configWith({ ...base, secrets: ['env:UNSET'] })).toThrow(/environment variable UNSET is not set/)
      expect(configWith({ ...base, secrets: ['   '] })).toThrow(ConfigError)
    })
  }

  it('secrets in the wrong form for their scheme', () => {
    expect(configWith({ scheme: 'stripe', secrets: ['sk_live_123'] })).toThrow(/starts with whsec_/)
    expect(configWith({ scheme: 'standard-webhooks', secrets: ['whpk_AAAA'] })).toThrow(/32 bytes/)
    const { signingKey } = generateStandardWebhooksKeyPair()
    expect(configWith({ scheme: 'standard-webhooks', secrets: [signingKey] })).toThrow(
      /whpk_ public key instead/,
    )
    const hmac = { scheme: 'hmac', header: 'X-Sig', eventId: { header: 'X-Id' } }
    expect(configWith({ ...hmac, secrets: ['not hex'], secretEncoding: 'hex' })).toThrow(/not valid hex/)
    expect(configWith({ scheme: 'square', secrets: ['k'] })).toThrow(/notificationUrl/)
  })

  it('hmac templates that leave the body, the timestamp or the id unsigned', () => {
    const hmac = { scheme: 'hmac', secrets: ['s'], header: 'X-Sig', eventId: { jsonPointer: '/id' } }
    expect(configWith({ ...hmac, signedContent: '{timestamp}' })).toThrow(
      /must contain \{body\} exactly once/,
    )
    expect(configWith({ ...hmac, signedContent: '{body}{body}' })).toThrow(/exactly once/)
    expect(configWith({ ...hmac, timestamp: { header: 'X-Ts' } })).toThrow(/must contain \{timestamp\}/)
    expect(configWith({ ...hmac, signedContent: '{timestamp}.{body}' })).toThrow(
      /verify.timestamp is not configured/,
    )
    expect(configWith({ ...hmac, signedContent: '{id}.{body}' })).toThrow(
      /needs verify.eventId to name a header/,
    )
    expect(configWith({ ...hmac, signedContent: '{nonce}.{body}' })).toThrow(/unknown placeholder \{nonce\}/)
    expect(configWith({ ...hmac, eventId: { jsonPointer: 'id' } })).toThrow(/JSON pointer/)
  })
})

describe('event ids fail closed', () => {
  const verify = (config: unknown, body: string, headers: Record<string, string>) =>
    createVerifier(verifyConfigSchema.parse(config), { sourceId: 't', resolveSecret: (r) => r }).verify({
      raw: Buffer.from(body),
      headers,
      now: Date.now(),
    })

  it('an empty, blank or non-scalar id is never a key', () => {
    const stripe = { scheme: 'stripe', secrets: ['whsec_ids'] }
    for (const body of ['{"id":""}', '{"id":"  "}', '{"id":null}', '{}']) {
      expect(verify(stripe, body, signDelivery('stripe', 'whsec_ids', body))).toMatchObject({
        kind: 'rejected',
        code: 'missing_event_id',
      })
    }
    const nested = '{"id":{"x":1}}'
    expect(verify(stripe, nested, signDelivery('stripe', 'whsec_ids', nested))).toMatchObject({
      code: 'invalid_event_id',
    })
  })

  it('hmac: an integer id in the body becomes its decimal text', () => {
    const config = { scheme: 'hmac', secrets: ['s'], header: 'X-Sig', eventId: { jsonPointer: '/data/0/n' } }
    const body = '{"data":[{"n":12345}]}'
    const { secrets: _s, ...scheme } = config
    expect(verify(config, body, signDelivery(scheme as never, 's', body))).toMatchObject({
      kind: 'verified',
      eventId: '12345',
    })
  })

  it('shopify: an empty X-Shopify-Event-Id does not fall back to the webhook id', () => {
    const body = '{"id":1}'
    const headers = {
      ...signDelivery('shopify', 'k', body, { id: 'wh-1' }),
      'x-shopify-event-id': '',
    }
    expect(verify({ scheme: 'shopify', secrets: ['k'] }, body, headers)).toMatchObject({
      code: 'missing_event_id',
    })
  })
})

describe('retry horizons, for the retention check', () => {
  it('each scheme records how long its provider retries', () => {
    expect(SCHEMES.stripe.retryHorizonSeconds).toBe(3 * 24 * 3600)
    expect(SCHEMES.shopify.retryHorizonSeconds).toBe(4 * 3600)
    expect(SCHEMES.github.retryHorizonSeconds).toBe(0)
    expect(SCHEMES['standard-webhooks'].retryHorizonSeconds).toBeGreaterThan(27.6 * 3600)
    expect(SCHEMES.slack.retryHorizonSeconds).toBeLessThan(3600)
    expect(SCHEMES.hmac.retryHorizonSeconds).toBeNull()
  })

  it('a generic hmac source may state its own', () => {
    const base = { scheme: 'hmac', secrets: ['s'], header: 'X-Sig', eventId: { header: 'X-Id' } } as const
    expect(providerRetryHorizonSeconds(verifyConfigSchema.parse(base))).toBeNull()
    expect(
      providerRetryHorizonSeconds(verifyConfigSchema.parse({ ...base, retryHorizonSeconds: 86_400 })),
    ).toBe(86_400)
    expect(providerRetryHorizonSeconds(verifyConfigSchema.parse({ scheme: 'github', secrets: ['s'] }))).toBe(
      0,
    )
  })
})

describe('signDelivery', () => {
  it('needs the settings of schemes that cannot sign from a name alone', () => {
    expect(() => signDelivery('square', 'k', '{}')).toThrow(/notificationUrl/)
    expect(() => signDelivery('standard-webhooks', [], '{}')).toThrow(/at least one secret/)
    const { publicKey } = generateStandardWebhooksKeyPair()
    expect(() => signDelivery('standard-webhooks', publicKey, '{}')).toThrow(/needs its whsk_ key/)
  })
})
