import { createHmac, webcrypto } from 'node:crypto'
import { sign as octokitSign, verify as octokitVerify } from '@octokit/webhooks-methods'
import { Webhook as StandardWebhook } from 'standardwebhooks'
import Stripe from 'stripe'
import { Webhook as SvixWebhook } from 'svix'
import { afterEach, describe, expect, it, vi } from 'vitest'
import type { Verification } from '../../src/config/verifier.js'
import { verifyConfigSchema } from '../../src/config/verify.js'
import { createVerifier } from '../../src/inbound/verifiers/index.js'
import { generateStandardWebhooksKeyPair, signDelivery } from '../../src/testing.js'
import { readVectorSets, type VectorCase } from '../support/vectors.js'

// The vectors are signed by our own signer; here each provider's library (or, for providers without
// one among our dev dependencies, an HMAC written out from the provider's docs) judges them, and
// signatures the libraries make are fed to our verifiers.

const sets = await readVectorSets()
const casesOf = (scheme: string): VectorCase[] => sets.find((set) => set.scheme === scheme)?.cases ?? []
const stripeClient = new Stripe('sk_test_cross_check_only')

function verifyWith(
  config: unknown,
  body: string,
  headers: Record<string, string>,
  now = Date.now(),
): Verification {
  const verifier = createVerifier(verifyConfigSchema.parse(config), {
    sourceId: 'x',
    resolveSecret: (r) => r,
  })
  return verifier.verify({ raw: Buffer.from(body), headers, now })
}

/** True when the vector's signature is good: verified, or refused only after the signature matched. */
function signatureGood(vector: VectorCase): boolean {
  const after = ['missing_event_id', 'invalid_event_id', 'invalid_json', 'invalid_body']
  return vector.expected.outcome !== 'rejected' || after.includes(vector.expected.code)
}

afterEach(() => {
  vi.useRealTimers()
})

describe('Standard Webhooks vectors, judged by standardwebhooks and svix', () => {
  const hmacOnly = casesOf('standard-webhooks').filter((vector) =>
    vector.config.secrets.every((secret) => !secret.startsWith('whpk_')),
  )

  it('covers the HMAC vectors', () => {
    expect(hmacOnly.length).toBeGreaterThan(8)
  })

  for (const vector of hmacOnly) {
    it(`${vector.name}: the libraries agree`, () => {
      vi.useFakeTimers({ toFake: ['Date'] })
      vi.setSystemTime(vector.now * 1000)
      const library = vector.headers['svix-id'] !== undefined ? SvixWebhook : StandardWebhook
      const accepted = vector.config.secrets.some((secret) => {
        try {
          new library(secret).verify(vector.body, vector.headers)
          return true
        } catch {
          return false
        }
      })
      // The one deliberate difference: an empty webhook-id is "missing" to us and to the library
      // alike, but we name it missing_event_id.
      const ours = vector.expected.outcome === 'verified'
      expect(accepted).toBe(ours)
    })
  }

  it('v1a vectors verify under WebCrypto Ed25519, independently of node:crypto.verify', async () => {
    const v1a = casesOf('standard-webhooks').filter((vector) => vector.name.startsWith('v1a-valid'))
    expect(v1a).toHaveLength(1)
    for (const vector of v1a) {
      const publicKey = vector.config.secrets[0]?.slice('whpk_'.length) ?? ''
      const key = await webcrypto.subtle.importKey(
        'raw',
        Buffer.from(publicKey, 'base64'),
        'Ed25519',
        false,
        ['verify'],
      )
      const signature = (vector.headers['webhook-signature'] ?? '').replace(/^v1a,/, '')
      const content = `${vector.headers['webhook-id']}.${vector.headers['webhook-timestamp']}.${vector.body}`
      const ok = await webcrypto.subtle.verify(
        'Ed25519',
        key,
        Buffer.from(signature, 'base64'),
        Buffer.from(content),
      )
      expect(ok).toBe(true)
    }
  })

  it('the libraries skip v1a: a v1a-only delivery that we verify, they cannot', () => {
    const { signingKey, publicKey } = generateStandardWebhooksKeyPair()
    const body = '{"type":"invoice.paid"}'
    const headers = signDelivery('standard-webhooks', signingKey, body, { id: 'msg_v1a' })
    expect(verifyWith({ scheme: 'standard-webhooks', secrets: [publicKey] }, body, headers)).toMatchObject({
      kind: 'verified',
      eventId: 'msg_v1a',
    })
    const hmacSecret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
    expect(() => new StandardWebhook(hmacSecret).verify(body, headers)).toThrow(/No matching signature/)
  })

  it('verifies what svix and standardwebhooks sign, with our v1a signature beside it', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
    const { signingKey, publicKey } = generateStandardWebhooksKeyPair()
    const body = '{"type":"invoice.paid","data":{"id":"in_1"}}'
    const now = new Date()
    const v1 = new SvixWebhook(secret).sign('msg_lib', now, body)
    const ours = signDelivery('standard-webhooks', signingKey, body, { id: 'msg_lib', timestamp: now })
    const headers = {
      'webhook-id': 'msg_lib',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': `${v1} ${ours['webhook-signature']}`,
    }
    expect(verifyWith({ scheme: 'standard-webhooks', secrets: [secret] }, body, headers).kind).toBe(
      'verified',
    )
    expect(verifyWith({ scheme: 'standard-webhooks', secrets: [publicKey] }, body, headers).kind).toBe(
      'verified',
    )
    expect(new StandardWebhook(secret).sign('msg_lib', now, body)).toBe(
      signDelivery('standard-webhooks', secret, body, { id: 'msg_lib', timestamp: now })['webhook-signature'],
    )
  })
})

describe('Stripe vectors, judged by the stripe package', () => {
  for (const vector of casesOf('stripe')) {
    it(`${vector.name}: stripe.webhooks.constructEvent agrees`, () => {
      const header = vector.headers['stripe-signature']
      const accepted =
        header !== undefined &&
        vector.config.secrets.some((secret) => {
          try {
            stripeClient.webhooks.constructEvent(
              vector.body,
              header,
              secret,
              300,
              undefined,
              vector.now * 1000,
            )
            return true
          } catch {
            return false
          }
        })
      // Stripe's library does not refuse timestamps from the future; we do (a sender's clock that
      // far ahead, or a forged `t`, earns a 401 rather than a window that starts later).
      const expected = vector.name === 'from-the-future' ? true : signatureGood(vector)
      expect(accepted).toBe(expected)
    })
  }

  it('verifies headers made by stripe.webhooks.generateTestHeaderString, with rotated secrets', () => {
    const secret = 'whsec_cross_check_current'
    const old = 'whsec_cross_check_previous'
    const body = JSON.stringify({ id: 'evt_cross_1', object: 'event', type: 'charge.succeeded' })
    const timestamp = Math.floor(Date.now() / 1000)
    const current = stripeClient.webhooks.generateTestHeaderString({ payload: body, secret, timestamp })
    const previous = stripeClient.webhooks.generateTestHeaderString({ payload: body, secret: old, timestamp })
    const config = { scheme: 'stripe', secrets: [secret, old] }
    expect(verifyWith(config, body, { 'stripe-signature': current })).toMatchObject({
      kind: 'verified',
      eventId: 'evt_cross_1',
      eventType: 'charge.succeeded',
    })
    expect(verifyWith(config, body, { 'stripe-signature': previous }).kind).toBe('verified')
    expect(signDelivery('stripe', secret, body, { timestamp })['stripe-signature']).toBe(current)
    expect(
      verifyWith({ scheme: 'stripe', secrets: ['whsec_other'] }, body, { 'stripe-signature': current }),
    ).toMatchObject({
      kind: 'rejected',
      code: 'invalid_signature',
    })
  })
})

describe('GitHub vectors, judged by @octokit/webhooks-methods', () => {
  for (const vector of casesOf('github')) {
    it(`${vector.name}: verify() agrees`, async () => {
      const header = vector.headers['x-hub-signature-256']
      let accepted = false
      for (const secret of vector.config.secrets) {
        // octokit takes one signature; a comma-joined header (a proxy merging two) is tried entry by entry.
        for (const signature of header?.split(',') ?? []) {
          accepted ||= await octokitVerify(secret, vector.body, signature).catch(() => false)
        }
      }
      expect(accepted).toBe(signatureGood(vector))
    })
  }

  it('verifies what octokit signs, and never a sha1 signature', async () => {
    const secret = 'cross-check-github'
    const body = JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1 })
    const signature = await octokitSign(secret, body)
    const headers = { 'x-hub-signature-256': signature, 'x-github-delivery': 'd-1', 'x-github-event': 'ping' }
    expect(verifyWith({ scheme: 'github', secrets: [secret] }, body, headers)).toMatchObject({
      kind: 'verified',
      eventId: 'd-1',
      eventType: 'ping',
    })
    const sha1 = `sha1=${createHmac('sha1', secret).update(body).digest('hex')}`
    expect(
      verifyWith({ scheme: 'github', secrets: [secret] }, body, {
        'x-hub-signature': sha1,
        'x-github-delivery': 'd-2',
      }),
    ).toMatchObject({ kind: 'rejected', code: 'missing_signature_headers' })
  })
})

describe("the other schemes, against an HMAC written out from each provider's docs", () => {
  const hmac = (algorithm: string, key: Buffer | string, content: string, encoding: 'hex' | 'base64') =>
    createHmac(algorithm, key).update(content).digest(encoding)
  const reference: Record<string, (vector: VectorCase) => [header: string, value: string]> = {
    shopify: (v) => ['x-shopify-hmac-sha256', hmac('sha256', v.config.secrets[0] ?? '', v.body, 'base64')],
    slack: (v) => {
      const ts = v.headers['x-slack-request-timestamp'] ?? ''
      return [
        'x-slack-signature',
        `v0=${hmac('sha256', v.config.secrets[0] ?? '', `v0:${ts}:${v.body}`, 'hex')}`,
      ]
    },
    paddle: (v) => {
      const ts = /ts=(\d+)/.exec(v.headers['paddle-signature'] ?? '')?.[1] ?? ''
      return [
        'paddle-signature',
        `ts=${ts};h1=${hmac('sha256', v.config.secrets[0] ?? '', `${ts}:${v.body}`, 'hex')}`,
      ]
    },
    square: (v) => {
      const url = v.config.scheme === 'square' ? v.config.notificationUrl : ''
      return [
        'x-square-hmacsha256-signature',
        hmac('sha256', v.config.secrets[0] ?? '', url + v.body, 'base64'),
      ]
    },
    hmac: (v) => {
      const ts = v.headers['x-timestamp'] ?? ''
      return ['x-signature', `sha256=${hmac('sha256', v.config.secrets[0] ?? '', `${ts}.${v.body}`, 'hex')}`]
    },
  }
  for (const [scheme, expected] of Object.entries(reference)) {
    it(`${scheme}: the valid vector's header is the documented HMAC`, () => {
      const vector = casesOf(scheme).find((candidate) => candidate.name === 'valid')
      expect(vector).toBeDefined()
      if (vector === undefined) return
      const [header, value] = expected(vector)
      expect(vector.headers[header]).toBe(value)
    })
  }
})
