import { describe, expect, test } from 'vitest'
import { type VerifyConfigInput, verifyConfigSchema } from '../../config/verify.js'
import { createVerifier, signWith } from './index.js'
import { MAX_SIGNATURE_ENTRIES } from './signature-header.js'

// Every scheme that reads a signature list through the shared parser caps it: a sender signing with
// 16 secrets (far more than any rotation needs) still verifies, 17 are refused before any HMAC runs.

const NOW_SECONDS = 1_700_000_000
const BODY = JSON.stringify({ id: 'evt_1', event_id: 'evt_1', type: 'ping' })

const CONFIGS: { config: VerifyConfigInput; signatureHeader: string }[] = [
  { config: { scheme: 'stripe', secrets: ['whsec_cap'] }, signatureHeader: 'stripe-signature' },
  { config: { scheme: 'paddle', secrets: ['cap'] }, signatureHeader: 'paddle-signature' },
  { config: { scheme: 'slack', secrets: ['cap'] }, signatureHeader: 'x-slack-signature' },
  { config: { scheme: 'github', secrets: ['cap'] }, signatureHeader: 'x-hub-signature-256' },
  { config: { scheme: 'shopify', secrets: ['cap'] }, signatureHeader: 'x-shopify-hmac-sha256' },
  {
    config: { scheme: 'square', secrets: ['cap'], notificationUrl: 'https://h.example.com/sq' },
    signatureHeader: 'x-square-hmacsha256-signature',
  },
  {
    config: { scheme: 'hmac', secrets: ['cap'], header: 'X-Sig', eventId: { jsonPointer: '/id' } },
    signatureHeader: 'x-sig',
  },
]

function deliverySignedBy(input: VerifyConfigInput, signers: number) {
  const config = verifyConfigSchema.parse(input)
  const configured = config.secrets[0] ?? ''
  // The configured secret signs last, so only a verifier that reads every entry can match it.
  const secrets = [
    ...Array.from({ length: signers - 1 }, (_, index) => `${configured}-other-${index}`),
    configured,
  ]
  const raw = new TextEncoder().encode(BODY)
  const headers = signWith(config, secrets, { raw, timestamp: NOW_SECONDS, id: 'evt_1' })
  const verifier = createVerifier(config, { sourceId: 'cap', resolveSecret: (reference) => reference })
  return verifier.verify({ raw, headers, now: NOW_SECONDS * 1000 })
}

describe(`a signature header carries at most ${MAX_SIGNATURE_ENTRIES} entries`, () => {
  test.each(CONFIGS)('$config.scheme: 16 verify, 17 are refused', ({ config, signatureHeader }) => {
    expect(deliverySignedBy(config, MAX_SIGNATURE_ENTRIES)).toMatchObject({ kind: 'verified' })
    expect(deliverySignedBy(config, MAX_SIGNATURE_ENTRIES + 1)).toEqual({
      kind: 'rejected',
      code: 'too_many_signatures',
      message: `${signatureHeader} carries more than 16 signatures; at most 16 are accepted`,
    })
  })
})
