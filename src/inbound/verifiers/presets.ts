import { ConfigError } from '../../config/errors.js'
import { stringAt } from './body.js'
import { headerHmacScheme } from './header-hmac.js'
import { base64List } from './signature-header.js'

// The providers whose scheme is one HMAC-SHA256 header, as data for headerHmacScheme.

/**
 * Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, HMAC-SHA256 over `{t}.{body}`. The `whsec_`
 * secret is used as its literal bytes — unlike Standard Webhooks it is not base64-decoded. `v0` and
 * unknown schemes are ignored, never verified: accepting a weaker scheme the sender also lists would
 * let an attacker downgrade to it.
 */
export const stripe = headerHmacScheme({
  name: 'stripe',
  // Live mode retries with exponential backoff for up to three days.
  retryHorizonSeconds: 3 * 24 * 3600,
  header: {
    name: 'stripe-signature',
    separator: ',',
    timestampKey: 't',
    signaturePrefix: 'v1=',
    encoding: 'hex',
  },
  signedBefore: (_config, timestamp) => `${timestamp}.`,
  checkSecret(secret, index) {
    // An API key pasted in place of the endpoint's signing secret is the usual mistake; every
    // Stripe signing secret (dashboard or `stripe listen`) starts with whsec_.
    if (!secret.startsWith('whsec_')) {
      throw new ConfigError(`verify.secrets[${index}]: a Stripe signing secret starts with whsec_`)
    }
  },
  eventId: { pointer: '/id' },
  eventType: (_headers, body) => stringAt(body, '/type'),
  mismatch: 'no v1 signature matches any configured secret',
})

/**
 * Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256(secret, "{ts}:{body}")>`, with
 * one `h1` per active secret while a notification destination's secret is being rotated.
 */
export const paddle = headerHmacScheme({
  name: 'paddle',
  // Live notifications are retried with backoff for about three days (sandbox: a few tries within
  // minutes).
  retryHorizonSeconds: 3 * 24 * 3600,
  header: {
    name: 'paddle-signature',
    separator: ';',
    timestampKey: 'ts',
    signaturePrefix: 'h1=',
    encoding: 'hex',
  },
  signedBefore: (_config, timestamp) => `${timestamp}:`,
  eventId: { pointer: '/event_id' },
  eventType: (_headers, body) => stringAt(body, '/event_type'),
  mismatch: 'no h1 signature matches any configured secret',
})

/**
 * Square: `X-Square-HmacSha256-Signature: base64(HMAC-SHA256(signature key, notificationUrl + body))`.
 * The URL is the one registered with Square, configured here because a proxy or load balancer in
 * front of hookledger rewrites what the request line says. Square signs no timestamp: replays are
 * stopped by the ledger's (source, event_id) key.
 */
export const square = headerHmacScheme({
  name: 'square',
  // Retried for up to 72 hours after the event.
  retryHorizonSeconds: 72 * 3600,
  header: base64List('x-square-hmacsha256-signature'),
  signedBefore: (config) => config.notificationUrl,
  eventId: { pointer: '/event_id' },
  eventType: (_headers, body) => stringAt(body, '/type'),
  kept: ['square-initial-delivery-timestamp', 'square-retry-number', 'square-retry-reason'],
  mismatch: 'the signature matches no configured key and notification URL',
})

/**
 * Shopify: `X-Shopify-Hmac-Sha256: base64(HMAC-SHA256(app client secret, body))`. After a secret is
 * rotated Shopify may keep signing with the old one for up to an hour, so both belong in `secrets`
 * for that long. X-Shopify-Event-Id is the same for one event across subscriptions and retries; the
 * per-delivery X-Shopify-Webhook-Id is the fallback (older API versions send only it).
 */
export const shopify = headerHmacScheme({
  name: 'shopify',
  // 8 retries over 4 hours, with the original payload.
  retryHorizonSeconds: 4 * 3600,
  header: base64List('x-shopify-hmac-sha256'),
  signedBefore: () => '',
  eventId: { headers: ['x-shopify-event-id', 'x-shopify-webhook-id'], sendAs: 'x-shopify-webhook-id' },
  eventType: (headers) => headers['x-shopify-topic'] ?? null,
  kept: [
    'x-shopify-event-id',
    'x-shopify-webhook-id',
    'x-shopify-topic',
    'x-shopify-shop-domain',
    'x-shopify-api-version',
    'x-shopify-triggered-at',
    'x-shopify-sub-topic',
  ],
})

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`. The legacy SHA-1
 * `X-Hub-Signature` is never consulted, even when it is the only one present. GitHub signs no
 * timestamp, so a captured delivery stays valid forever: replay protection rests on the ledger's
 * (source, X-GitHub-Delivery) key alone, for as long as rows are kept. GitHub sends one signature; a
 * comma list is accepted so that a proxy joining repeated headers does not break verification.
 */
export const github = headerHmacScheme({
  name: 'github',
  // GitHub never redelivers on its own: a failed delivery is redelivered by hand or through its API.
  retryHorizonSeconds: 0,
  header: { name: 'x-hub-signature-256', separator: ',', signaturePrefix: 'sha256=', encoding: 'hex' },
  signedBefore: () => '',
  eventId: { headers: ['x-github-delivery'], sendAs: 'x-github-delivery' },
  eventType: (headers, body) => githubEventType(headers['x-github-event'], body),
  kept: [
    'x-github-delivery',
    'x-github-event',
    'x-github-hook-id',
    'x-github-hook-installation-target-id',
    'x-github-hook-installation-target-type',
  ],
  missingNote: 'sha1 signatures are not accepted',
})

/** `push`, or `pull_request.opened` when the body names an action. */
function githubEventType(event: string | undefined, body: unknown): string | null {
  if (event === undefined) return null
  const action =
    typeof body === 'object' && body !== null && 'action' in body && typeof body.action === 'string'
      ? body.action
      : undefined
  return action === undefined ? event : `${event}.${action}`
}
