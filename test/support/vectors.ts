import { createHash, createHmac } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { type VerifyConfigInput, verifyConfigSchema } from '../../src/config/verify.js'
import { standardWebhooksPublicKeyOf } from '../../src/inbound/verifiers/standard-webhooks.js'
import { signDelivery } from '../../src/testing.js'
import { SPEC_VECTOR } from './signing.js'

/**
 * The conformance vectors in fixtures/vectors/*.json, and the code that made them. The files are the
 * contract (any language can run them); this builder only exists so they can be regenerated
 * (`npx tsx test/support/write-vectors.ts`) and so a test can prove the files and the code agree.
 * The signatures come from our own signer, so the tests also check them against each provider's
 * library (Standard Webhooks, Stripe, GitHub) or an HMAC written out independently (the rest).
 */

export const VECTORS_DIR = new URL('../../fixtures/vectors/', import.meta.url)

export type Expected =
  | { outcome: 'verified'; eventId: string }
  | { outcome: 'handshake'; status: 200; response: unknown }
  | { outcome: 'rejected'; status: 400 | 401; code: string }

export interface VectorCase {
  name: string
  description: string
  /** The source's `verify` block; secrets are literal values. */
  config: VerifyConfigInput
  /** The receiver's clock, Unix seconds. */
  now: number
  /** Lower-case names. */
  headers: Record<string, string>
  /** The exact body, as UTF-8. */
  body: string
  expected: Expected
}

export interface VectorSet {
  scheme: string
  description: string
  cases: VectorCase[]
}

/** 2026-12-02T10:40:00Z, the moment every vector was "sent". */
export const SENT_AT = 1796208000

const verified = (eventId: string): Expected => ({ outcome: 'verified', eventId })
const rejected = (code: string): Expected => ({
  outcome: 'rejected',
  status: code === 'invalid_signature' || code === 'timestamp_out_of_tolerance' ? 401 : 400,
  code,
})

type SigningConfig = Parameters<typeof signDelivery>[0]

function withoutSecrets(config: VerifyConfigInput): SigningConfig {
  const { secrets: _secrets, ...rest } = config
  return rest as SigningConfig
}

interface Common {
  config: VerifyConfigInput
  wrongSecret: string
  oldSecret: string
  body: string
  /** Extra, unsigned headers the provider sends (ids, topics, content type). */
  headers: Record<string, string>
  id?: string
  eventId: string
  /** The header that holds the signature, to break it for the malformed case. */
  signatureHeader: string
  malformed: string
  timestamped: boolean
  /** A body (and headers) that verify but carry no event id. */
  missingId: { body: string; headers: Record<string, string> }
}

/** The cases every scheme answers: valid, tampered, wrong secret, tolerance, rotation, malformed, ids. */
function commonCases(common: Common): VectorCase[] {
  const secrets = common.config.secrets
  const [secret] = secrets
  if (secret === undefined) throw new Error('a vector config needs a secret')
  const signingConfig = withoutSecrets(common.config)
  const sign = (options: {
    secrets?: string[]
    body?: string
    at?: number
    headers?: Record<string, string>
  }) => ({
    ...(options.headers ?? common.headers),
    ...signDelivery(signingConfig, options.secrets ?? [secret], options.body ?? common.body, {
      ...(common.id === undefined ? {} : { id: common.id }),
      timestamp: options.at ?? SENT_AT,
    }),
  })
  const base = { config: common.config, now: SENT_AT + 2, body: common.body }
  const cases: VectorCase[] = [
    {
      ...base,
      name: 'valid',
      description: 'signed with the configured secret, received two seconds later',
      headers: sign({}),
      expected: verified(common.eventId),
    },
    {
      ...base,
      name: 'tampered-body',
      description: 'the signature of the original body, sent with one byte changed',
      headers: sign({}),
      body: common.body.replace(/.$/s, (last) => (last === '}' ? ' }' : `${last} `)),
      expected: rejected('invalid_signature'),
    },
    {
      ...base,
      name: 'wrong-secret',
      description: 'signed with a secret the source does not hold',
      headers: sign({ secrets: [common.wrongSecret] }),
      expected: rejected('invalid_signature'),
    },
    {
      ...base,
      config: { ...common.config, secrets: [secret, common.oldSecret] },
      name: 'rotated-secret',
      description: 'the source holds the new and the old secret; the sender still signs with the old one',
      headers: sign({ secrets: [common.oldSecret] }),
      expected: verified(common.eventId),
    },
    {
      ...base,
      name: 'several-signatures',
      description: 'the header carries a signature by an unknown secret, then one by the configured secret',
      headers: sign({ secrets: [common.wrongSecret, secret] }),
      expected: verified(common.eventId),
    },
    {
      ...base,
      name: 'malformed-header',
      description: 'the signature header is present but holds nothing this scheme can read',
      headers: { ...sign({}), [common.signatureHeader]: common.malformed },
      expected: rejected('malformed_signature_header'),
    },
    {
      ...base,
      name: 'missing-header',
      description: 'no signature header at all',
      headers: Object.fromEntries(
        Object.entries(sign({})).filter(([name]) => name !== common.signatureHeader),
      ),
      expected: rejected('missing_signature_headers'),
    },
    {
      ...base,
      name: 'missing-id',
      description: 'correctly signed, but the event id is absent: never a key made of an empty string',
      body: common.missingId.body,
      headers: sign({ body: common.missingId.body, headers: common.missingId.headers }),
      expected: rejected('missing_event_id'),
    },
  ]
  if (common.timestamped) {
    cases.push(
      {
        ...base,
        name: 'expired',
        description: 'signed 301 seconds before it arrived (tolerance 300 s)',
        headers: sign({ at: SENT_AT - 299 }),
        expected: rejected('timestamp_out_of_tolerance'),
      },
      {
        ...base,
        name: 'from-the-future',
        description: "signed 301 seconds after the receiver's clock",
        headers: sign({ at: SENT_AT + 303 }),
        expected: rejected('timestamp_out_of_tolerance'),
      },
      {
        ...base,
        name: 'edge-of-tolerance',
        description: 'signed exactly 300 seconds before it arrived: still inside the tolerance',
        headers: sign({ at: SENT_AT + 2 - 300 }),
        expected: verified(common.eventId),
      },
    )
  } else {
    cases.push({
      ...base,
      now: SENT_AT + 30 * 24 * 3600,
      name: 'no-timestamp',
      description:
        'a month-old delivery still verifies: this scheme signs no time, replays stop at the ledger',
      headers: sign({}),
      expected: verified(common.eventId),
    })
  }
  return cases
}

const json = (value: unknown) => JSON.stringify(value)

// Deterministic key material: vectors must come out byte-identical on every run.
const seeded = (label: string, bytes = 32) => createHash('sha512').update(label).digest().subarray(0, bytes)
const whsec = (label: string) => `whsec_${seeded(label).toString('base64')}`
const whsk = (label: string) => `whsk_${seeded(label).toString('base64')}`

function standardWebhooksSet(): VectorSet {
  const secret = whsec('std-secret')
  const body = json({ type: 'invoice.paid', data: { id: 'in_1042', amount_paid: 4200 } })
  const id = 'msg_2pL9cWbq0kXhJdUe7tVr4sYn1Aa'
  const signingKey = whsk('std-ed25519')
  const publicKey = standardWebhooksPublicKeyOf(signingKey)
  const otherPublicKey = standardWebhooksPublicKeyOf(whsk('std-ed25519-other'))
  const base = { now: SENT_AT + 2, body }
  const signed = (secrets: string[], messageId = id) =>
    signDelivery('standard-webhooks', secrets, body, { id: messageId, timestamp: SENT_AT })
  const cases = commonCases({
    config: { scheme: 'standard-webhooks', secrets: [secret] },
    wrongSecret: whsec('std-wrong'),
    oldSecret: whsec('std-old'),
    body,
    headers: { 'content-type': 'application/json' },
    id,
    eventId: id,
    signatureHeader: 'webhook-signature',
    malformed: 'v1=not-a-comma-list',
    timestamped: true,
    missingId: { body, headers: { 'content-type': 'application/json' } },
  }).map((vector) =>
    vector.name === 'missing-id'
      ? {
          ...vector,
          description: 'correctly signed over an empty webhook-id: never a key made of an empty string',
          headers: { ...signed([secret], ''), 'content-type': 'application/json' },
        }
      : vector,
  )
  cases.push(
    {
      name: 'spec-example',
      description: "the Standard Webhooks spec's published example (also in its Go, Java and C# tests)",
      config: { scheme: 'standard-webhooks', secrets: [SPEC_VECTOR.secret] },
      now: SPEC_VECTOR.timestamp,
      headers: {
        'webhook-id': SPEC_VECTOR.id,
        'webhook-timestamp': String(SPEC_VECTOR.timestamp),
        'webhook-signature': SPEC_VECTOR.signature,
      },
      body: SPEC_VECTOR.body,
      expected: verified(SPEC_VECTOR.id),
    },
    {
      ...base,
      name: 'svix-headers',
      description: 'a Svix-branded sender: the same scheme under svix-id, svix-timestamp, svix-signature',
      config: { scheme: 'standard-webhooks', secrets: [secret] },
      headers: Object.fromEntries(
        Object.entries(signed([secret])).map(([name, value]) => [name.replace('webhook-', 'svix-'), value]),
      ),
      expected: verified(id),
    },
    {
      ...base,
      name: 'v1a-valid',
      description: "ed25519 (v1a), verified with the whpk_ public key of the sender's whsk_ key",
      config: { scheme: 'standard-webhooks', secrets: [publicKey] },
      headers: signed([signingKey]),
      expected: verified(id),
    },
    {
      ...base,
      name: 'v1a-wrong-key',
      description: 'ed25519 signature checked against another public key',
      config: { scheme: 'standard-webhooks', secrets: [otherPublicKey] },
      headers: signed([signingKey]),
      expected: rejected('invalid_signature'),
    },
    {
      ...base,
      name: 'v1a-tampered-body',
      description: 'ed25519 signature of the original body, sent with the body changed',
      config: { scheme: 'standard-webhooks', secrets: [publicKey] },
      headers: signed([signingKey]),
      body: body.replace('4200', '4201'),
      expected: rejected('invalid_signature'),
    },
    {
      ...base,
      name: 'v1-and-v1a',
      description:
        'a sender migrating to ed25519 signs both ways; a receiver holding only the public key verifies',
      config: { scheme: 'standard-webhooks', secrets: [publicKey] },
      headers: signed([secret, signingKey]),
      expected: verified(id),
    },
    {
      ...base,
      name: 'v1a-only-hmac-secret',
      description: 'an ed25519 signature sent to a source that holds only an HMAC secret',
      config: { scheme: 'standard-webhooks', secrets: [secret] },
      headers: signed([signingKey]),
      expected: rejected('invalid_signature'),
    },
  )
  return {
    scheme: 'standard-webhooks',
    description: 'Standard Webhooks v1 (HMAC-SHA256, whsec_ base64 secrets) and v1a (ed25519, whpk_ keys)',
    cases,
  }
}

function stripeSet(): VectorSet {
  const secret = 'whsec_vectorsStripeSigningSecret0000001'
  const body = json({
    id: 'evt_3QmZx8LkdIwHu7ix0A1b2C3d',
    object: 'event',
    type: 'payment_intent.succeeded',
    data: { object: { id: 'pi_3QmZx8LkdIwHu7ix0Xy9Zt4Q', amount: 4200 } },
  })
  const config: VerifyConfigInput = { scheme: 'stripe', secrets: [secret] }
  const cases = commonCases({
    config,
    wrongSecret: 'whsec_vectorsStripeSigningSecretWRONG',
    oldSecret: 'whsec_vectorsStripeSigningSecretOLD01',
    body,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    eventId: 'evt_3QmZx8LkdIwHu7ix0A1b2C3d',
    signatureHeader: 'stripe-signature',
    malformed: 't=notanumber,v1=abc',
    timestamped: true,
    missingId: {
      body: json({ object: 'event', type: 'ping' }),
      headers: { 'content-type': 'application/json' },
    },
  })
  const signature = signDelivery('stripe', secret, body, { timestamp: SENT_AT })['stripe-signature'] ?? ''
  const v1 = signature.split(',')[1] ?? ''
  cases.push(
    {
      name: 'v0-only',
      description: 'only a v0 signature (with the correct value): v0 is ignored, never verified',
      config,
      now: SENT_AT + 2,
      headers: { 'stripe-signature': `t=${SENT_AT},v0=${v1.slice(3)}` },
      body,
      expected: rejected('malformed_signature_header'),
    },
    {
      name: 'v0-beside-v1',
      description: 'a v0 entry next to the valid v1 one is skipped',
      config,
      now: SENT_AT + 2,
      headers: { 'stripe-signature': `t=${SENT_AT},v0=${'0'.repeat(64)},${v1}` },
      body,
      expected: verified('evt_3QmZx8LkdIwHu7ix0A1b2C3d'),
    },
    {
      name: 'secret-not-base64-decoded',
      description:
        'signed with the base64-decoded secret bytes (the Standard Webhooks habit): Stripe uses the literal string',
      config: { scheme: 'stripe', secrets: ['whsec_c2VjcmV0LWJ5dGVzLWZvci1zdHJpcGUtdGVzdA=='] },
      now: SENT_AT + 2,
      headers: {
        'stripe-signature': `t=${SENT_AT},v1=${createHmac(
          'sha256',
          Buffer.from('c2VjcmV0LWJ5dGVzLWZvci1zdHJpcGUtdGVzdA==', 'base64'),
        )
          .update(`${SENT_AT}.${body}`)
          .digest('hex')}`,
      },
      body,
      expected: rejected('invalid_signature'),
    },
  )
  return {
    scheme: 'stripe',
    description: 'Stripe-Signature: t=…,v1=<hex HMAC-SHA256 over "{t}.{body}">',
    cases,
  }
}

function githubSet(): VectorSet {
  const secret = 'vectors-github-webhook-secret'
  const delivery = '72d3162e-cc78-11e3-81ab-4c9367dc0958'
  const body = json({
    ref: 'refs/heads/main',
    after: '0d1a26e6',
    repository: { full_name: 'acme/storefront' },
  })
  const headers = {
    'content-type': 'application/json',
    'x-github-event': 'push',
    'x-github-delivery': delivery,
  }
  const cases = commonCases({
    config: { scheme: 'github', secrets: [secret] },
    wrongSecret: 'not-the-github-secret',
    oldSecret: 'vectors-github-webhook-secret-old',
    body,
    headers,
    eventId: delivery,
    signatureHeader: 'x-hub-signature-256',
    malformed: 'sha1=0123456789abcdef0123456789abcdef01234567',
    timestamped: false,
    missingId: { body, headers: { 'content-type': 'application/json', 'x-github-event': 'push' } },
  })
  cases.push(
    {
      name: 'docs-example',
      description:
        'GitHub\'s documented example (secret "It\'s a Secret to Everybody", body "Hello, World!"): the signature matches, and the body is then refused as not JSON',
      config: { scheme: 'github', secrets: ["It's a Secret to Everybody"] },
      now: SENT_AT,
      headers: {
        'x-hub-signature-256': 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
        'x-github-delivery': delivery,
      },
      body: 'Hello, World!',
      expected: rejected('invalid_json'),
    },
    {
      name: 'sha1-only',
      description: 'only the legacy X-Hub-Signature (SHA-1) header: never accepted',
      config: { scheme: 'github', secrets: [secret] },
      now: SENT_AT,
      headers: {
        ...headers,
        'x-hub-signature': `sha1=${createHash('sha1').update(body).digest('hex')}`,
      },
      body,
      expected: rejected('missing_signature_headers'),
    },
  )
  return {
    scheme: 'github',
    description: 'X-Hub-Signature-256: sha256=<hex HMAC-SHA256 over the body>',
    cases,
  }
}

function shopifySet(): VectorSet {
  const secret = 'vectors-shopify-app-client-secret'
  const body = json({ id: 820982911946154, name: '#9999', total_price: '403.00' })
  const webhookId = 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043'
  const eventId = '98880550-7158-44d4-b7cd-2c97c8a091b5'
  const headers = {
    'content-type': 'application/json',
    'x-shopify-topic': 'orders/create',
    'x-shopify-webhook-id': webhookId,
    'x-shopify-event-id': eventId,
  }
  const cases = commonCases({
    config: { scheme: 'shopify', secrets: [secret] },
    wrongSecret: 'not-the-shopify-secret',
    oldSecret: 'vectors-shopify-app-client-secret-old',
    body,
    headers,
    eventId,
    signatureHeader: 'x-shopify-hmac-sha256',
    malformed: 'not base64!',
    timestamped: false,
    missingId: { body, headers: { 'content-type': 'application/json', 'x-shopify-topic': 'orders/create' } },
  })
  cases.push({
    name: 'webhook-id-fallback',
    description:
      'no X-Shopify-Event-Id (older API versions): the per-delivery X-Shopify-Webhook-Id is the key',
    config: { scheme: 'shopify', secrets: [secret] },
    now: SENT_AT,
    headers: {
      'content-type': 'application/json',
      'x-shopify-topic': 'orders/create',
      ...signDelivery('shopify', secret, body, { id: webhookId }),
    },
    body,
    expected: verified(webhookId),
  })
  return { scheme: 'shopify', description: 'X-Shopify-Hmac-Sha256: base64 HMAC-SHA256 over the body', cases }
}

function slackSet(): VectorSet {
  const secret = '8f742231b10e8888abcd99yyyzzz85a5'
  const body = json({
    type: 'event_callback',
    team_id: 'T0123ABCD',
    event: { type: 'app_mention' },
    event_id: 'Ev08MFMKH6',
  })
  const config: VerifyConfigInput = { scheme: 'slack', secrets: [secret] }
  const cases = commonCases({
    config,
    wrongSecret: '0000000000000000aaaaaaaaaaaaaaaa',
    oldSecret: 'aaaabbbbccccddddeeeeffff00001111',
    body,
    headers: { 'content-type': 'application/json' },
    eventId: 'Ev08MFMKH6',
    signatureHeader: 'x-slack-signature',
    malformed: 'v1=deadbeef',
    timestamped: true,
    missingId: {
      body: json({ type: 'event_callback', event: { type: 'app_mention' } }),
      headers: { 'content-type': 'application/json' },
    },
  })
  const handshake = json({
    token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl',
    challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P',
    type: 'url_verification',
  })
  const form = `payload=${encodeURIComponent(json({ type: 'block_actions', trigger_id: '8208461925573.12345678.0a1b2c3d4e5f', actions: [{ action_id: 'approve' }] }))}`
  const slash =
    'token=gIkuvaNzQIHg97ATvDxqgjtO&team_id=T0001&command=%2Fdeploy&text=storefront+main&trigger_id=13345224609.738474920.8088930838d88f008e0'
  const signed = (payload: string, contentType: string) => ({
    'content-type': contentType,
    ...signDelivery('slack', secret, payload, { timestamp: SENT_AT }),
  })
  cases.push(
    {
      name: 'url-verification',
      description: "Slack's handshake, answered with its challenge once the signature checks out",
      config,
      now: SENT_AT + 1,
      headers: signed(handshake, 'application/json'),
      body: handshake,
      expected: {
        outcome: 'handshake',
        status: 200,
        response: { challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P' },
      },
    },
    {
      name: 'url-verification-unsigned',
      description: 'a handshake with a bad signature gets no challenge back',
      config,
      now: SENT_AT + 1,
      headers: { ...signed(handshake, 'application/json'), 'x-slack-signature': `v0=${'0'.repeat(64)}` },
      body: handshake,
      expected: rejected('invalid_signature'),
    },
    {
      name: 'interactivity-form',
      description: 'a form-encoded interactivity payload, verified over its raw bytes; trigger_id is the key',
      config,
      now: SENT_AT + 1,
      headers: signed(form, 'application/x-www-form-urlencoded'),
      body: form,
      expected: verified('8208461925573.12345678.0a1b2c3d4e5f'),
    },
    {
      name: 'slash-command-form',
      description: 'a form-encoded slash command; trigger_id is the key',
      config,
      now: SENT_AT + 1,
      headers: signed(slash, 'application/x-www-form-urlencoded'),
      body: slash,
      expected: verified('13345224609.738474920.8088930838d88f008e0'),
    },
  )
  return {
    scheme: 'slack',
    description: 'X-Slack-Signature: v0=<hex HMAC-SHA256 over "v0:{timestamp}:{body}">',
    cases,
  }
}

function paddleSet(): VectorSet {
  const secret = 'pdl_ntfset_01jdy7v8x2f3b6n1c7t9p5e0a4_vectorsSecret'
  const body = json({
    event_id: 'evt_01jdy7v8s0m5k9c2z0q8w4h3r1',
    event_type: 'transaction.completed',
    data: { id: 'txn_01' },
  })
  return {
    scheme: 'paddle',
    description: 'Paddle-Signature: ts=…;h1=<hex HMAC-SHA256 over "{ts}:{body}">',
    cases: commonCases({
      config: { scheme: 'paddle', secrets: [secret] },
      wrongSecret: 'pdl_ntfset_wrong',
      oldSecret: 'pdl_ntfset_01old_vectorsSecret',
      body,
      headers: { 'content-type': 'application/json' },
      eventId: 'evt_01jdy7v8s0m5k9c2z0q8w4h3r1',
      signatureHeader: 'paddle-signature',
      malformed: 'h1=abcdef',
      timestamped: true,
      missingId: {
        body: json({ event_type: 'transaction.completed' }),
        headers: { 'content-type': 'application/json' },
      },
    }),
  }
}

function squareSet(): VectorSet {
  const secret = 'vectors-square-signature-key'
  const notificationUrl = 'https://hooks.example.com/webhooks/square'
  const body = json({
    merchant_id: '6SSW7HV8K2ST5',
    type: 'payment.updated',
    event_id: '13b867cf-db3d-4b1c-90b6-2f32a9d78124',
  })
  const config: VerifyConfigInput = { scheme: 'square', secrets: [secret], notificationUrl }
  const cases = commonCases({
    config,
    wrongSecret: 'not-the-square-key',
    oldSecret: 'vectors-square-signature-key-old',
    body,
    headers: { 'content-type': 'application/json' },
    eventId: '13b867cf-db3d-4b1c-90b6-2f32a9d78124',
    signatureHeader: 'x-square-hmacsha256-signature',
    malformed: '%%%',
    timestamped: false,
    missingId: { body: json({ type: 'payment.updated' }), headers: { 'content-type': 'application/json' } },
  })
  cases.push({
    name: 'other-notification-url',
    description: 'signed for another notification URL (a proxy rewrote it, or another subscription)',
    config,
    now: SENT_AT,
    headers: {
      'content-type': 'application/json',
      ...signDelivery(
        { scheme: 'square', notificationUrl: 'http://internal:3000/webhooks/square' },
        secret,
        body,
      ),
    },
    body,
    expected: rejected('invalid_signature'),
  })
  return {
    scheme: 'square',
    description: 'X-Square-HmacSha256-Signature: base64 HMAC-SHA256 over URL + body',
    cases,
  }
}

function hmacSet(): VectorSet {
  const timestamped: VerifyConfigInput = {
    scheme: 'hmac',
    secrets: ['vectors-generic-hmac-secret'],
    header: 'X-Signature',
    algorithm: 'sha256',
    encoding: 'hex',
    prefix: 'sha256=',
    timestamp: { header: 'X-Timestamp', toleranceSeconds: 300 },
    signedContent: '{timestamp}.{body}',
    eventId: { jsonPointer: '/data/id' },
    eventType: { jsonPointer: '/type' },
  }
  const body = json({ type: 'order.paid', data: { id: 'ord_1042', total: 4200 } })
  const cases = commonCases({
    config: timestamped,
    wrongSecret: 'not-the-generic-secret',
    oldSecret: 'vectors-generic-hmac-secret-old',
    body,
    headers: { 'content-type': 'application/json' },
    eventId: 'ord_1042',
    signatureHeader: 'x-signature',
    malformed: 'md5=abc',
    timestamped: true,
    missingId: {
      body: json({ type: 'order.paid', data: {} }),
      headers: { 'content-type': 'application/json' },
    },
  })
  const plain: VerifyConfigInput = {
    scheme: 'hmac',
    secrets: [Buffer.from('binary-key-material-0123456789').toString('base64')],
    secretEncoding: 'base64',
    header: 'X-Webhook-Signature',
    algorithm: 'sha512',
    encoding: 'base64',
    signedContent: '{id}:{body}',
    eventId: { header: 'X-Webhook-Id' },
  }
  const plainBody = json({ event: 'ticket.closed', ticket: 7 })
  const plainHeaders = {
    'content-type': 'application/json',
    ...signDelivery(withoutSecrets(plain), plain.secrets, plainBody, { id: 'wh_7f3a' }),
  }
  cases.push(
    {
      name: 'sha512-base64-id-header',
      description:
        'SHA-512, base64, no prefix, no timestamp, the id header signed with the body, base64 secret',
      config: plain,
      now: SENT_AT,
      headers: plainHeaders,
      body: plainBody,
      expected: verified('wh_7f3a'),
    },
    {
      name: 'signed-id-swapped',
      description: 'the id header changed after signing: the id is part of the signed content',
      config: plain,
      now: SENT_AT,
      headers: { ...plainHeaders, 'x-webhook-id': 'wh_other' },
      body: plainBody,
      expected: rejected('invalid_signature'),
    },
    {
      name: 'signed-id-missing',
      description: 'the signed id header is absent',
      config: plain,
      now: SENT_AT,
      headers: Object.fromEntries(Object.entries(plainHeaders).filter(([name]) => name !== 'x-webhook-id')),
      body: plainBody,
      expected: rejected('missing_event_id'),
    },
  )
  return {
    scheme: 'hmac',
    description:
      'the generic scheme: header, sha256/sha512, hex/base64, prefix, timestamp, template, id locator',
    cases,
  }
}

/** Every vector set, in a stable order. */
export function buildVectorSets(): VectorSet[] {
  const sets = [
    standardWebhooksSet(),
    stripeSet(),
    githubSet(),
    shopifySet(),
    slackSet(),
    paddleSet(),
    squareSet(),
    hmacSet(),
  ]
  for (const set of sets) {
    for (const vector of set.cases) verifyConfigSchema.parse(vector.config)
  }
  return sets
}

/** The vector files as committed. */
export async function readVectorSets(): Promise<VectorSet[]> {
  const names = (await readdir(VECTORS_DIR)).filter((name) => name.endsWith('.json')).sort()
  return Promise.all(
    names.map(
      async (name) => JSON.parse(await readFile(join(VECTORS_DIR.pathname, name), 'utf8')) as VectorSet,
    ),
  )
}
