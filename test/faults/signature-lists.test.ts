import { describe, expect, it } from 'vitest'
import { type SchemeName, verifyConfigSchema } from '../../src/config/verify.js'
import { createVerifier, SCHEME_NAMES, signWith } from '../../src/inbound/verifiers/index.js'
import { MAX_SIGNATURES_PER_HEADER } from '../../src/inbound/verifiers/signatures.js'
import { generateStandardWebhooksKeyPair } from '../../src/testing.js'

// A forged header listing many signatures must not buy one verification per entry: every scheme
// counts the entries first and refuses more than MAX_SIGNATURES_PER_HEADER with a specific 400.

const BODY = Buffer.from(JSON.stringify({ id: 'evt_1', event_id: 'evt_1', type: 'demo' }))
const NOW = 1_796_208_000

const SECRET: Record<SchemeName, string> = {
  'standard-webhooks': 'whsec_dGVzdC1zZWNyZXQtZm9yLWhvb2tsZWRnZXItdGVzdHM=',
  stripe: 'whsec_stripe_test',
  github: 'github-secret',
  shopify: 'shopify-secret',
  slack: 'slack-secret',
  paddle: 'paddle-secret',
  square: 'square-secret',
  hmac: 'hmac-secret',
}

function configOf(scheme: SchemeName) {
  const extra =
    scheme === 'square'
      ? { notificationUrl: 'https://h.example.com/webhooks/sq' }
      : scheme === 'hmac'
        ? { header: 'X-Sig', eventId: { header: 'X-Id' } }
        : {}
  return verifyConfigSchema.parse({ scheme, secrets: [SECRET[scheme]], ...extra })
}

/** The headers of a sender signing with `copies` secrets (all the same one): `copies` entries. */
function headersWith(scheme: SchemeName, copies: number, secret = SECRET[scheme]) {
  const config = configOf(scheme)
  const headers = signWith(config, Array(copies).fill(secret), { raw: BODY, timestamp: NOW, id: 'evt_1' })
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]))
}

function verify(scheme: SchemeName, headers: Record<string, string>, secrets = [SECRET[scheme]]) {
  const config = verifyConfigSchema.parse({ ...configOf(scheme), secrets })
  const verifier = createVerifier(config, { sourceId: 'test', resolveSecret: (value) => value })
  return verifier.verify({ raw: BODY, headers, now: NOW * 1000 })
}

describe('signature lists are capped per header', () => {
  for (const scheme of SCHEME_NAMES) {
    it(`${scheme}: ${MAX_SIGNATURES_PER_HEADER + 1} entries → 400 too_many_signatures; a rotation's few still verify`, () => {
      expect(verify(scheme, headersWith(scheme, MAX_SIGNATURES_PER_HEADER + 1))).toMatchObject({
        kind: 'rejected',
        code: 'too_many_signatures',
      })
      // Stripe and Paddle list their timestamp in the same header, so it counts as an entry.
      expect(verify(scheme, headersWith(scheme, MAX_SIGNATURES_PER_HEADER - 1)).kind).toBe('verified')
    })
  }

  it('standard-webhooks v1a: 170 ed25519 entries are refused before any is verified', () => {
    const { signingKey, publicKey } = generateStandardWebhooksKeyPair()
    const forged = headersWith('standard-webhooks', 1, signingKey)
    const entry = forged['webhook-signature'] ?? ''
    // 169 forgeries (valid shape, wrong bytes) and the real signature last: without a cap, all 170
    // are checked and the delivery verifies after 170 ed25519 operations.
    const fake = `v1a,${Buffer.alloc(64, 7).toString('base64')}`
    const headers = { ...forged, 'webhook-signature': [...Array(169).fill(fake), entry].join(' ') }
    expect(verify('standard-webhooks', headers, [publicKey])).toMatchObject({
      kind: 'rejected',
      code: 'too_many_signatures',
      message: expect.stringContaining('170 entries'),
    })
    expect(verify('standard-webhooks', forged, [publicKey]).kind).toBe('verified')
  })
})
