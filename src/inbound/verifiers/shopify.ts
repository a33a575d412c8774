import { parseJsonBody, readEventId } from './body.js'
import { base64List, parseSignatureHeader } from './signature-header.js'
import { anyMatch, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Shopify: `X-Shopify-Hmac-Sha256: base64(HMAC-SHA256(app client secret, body))`. After a secret is
 * rotated Shopify may keep signing with the old one for up to an hour, so both belong in `secrets`
 * for that long.
 */

const SIGNATURE = 'x-shopify-hmac-sha256'
const EVENT_ID = 'x-shopify-event-id'
const WEBHOOK_ID = 'x-shopify-webhook-id'
const TOPIC = 'x-shopify-topic'
const KEPT = [
  SIGNATURE,
  EVENT_ID,
  WEBHOOK_ID,
  TOPIC,
  'x-shopify-shop-domain',
  'x-shopify-api-version',
  'x-shopify-triggered-at',
  'x-shopify-sub-topic',
]

const FORMAT = base64List(SIGNATURE)

export const shopify: Scheme<'shopify'> = {
  name: 'shopify',
  // 8 retries over 4 hours, with the original payload.
  retryHorizonSeconds: 4 * 3600,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        if (header === undefined)
          return reject('missing_signature_headers', `expected an ${SIGNATURE} header`)
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const expected = secrets.map((key) => hmac('sha256', key, delivery.raw))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'the signature matches no configured secret')
        }
        // X-Shopify-Event-Id is the same for one event across subscriptions and retries; the
        // per-delivery X-Shopify-Webhook-Id is the fallback (older API versions send only it).
        const eventId =
          delivery.headers[EVENT_ID] !== undefined
            ? readEventId(delivery.headers[EVENT_ID], EVENT_ID)
            : readEventId(delivery.headers[WEBHOOK_ID], `${EVENT_ID} or ${WEBHOOK_ID}`)
        if (typeof eventId !== 'string') return eventId
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        return {
          kind: 'verified',
          eventId,
          eventType: delivery.headers[TOPIC] ?? null,
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, KEPT),
        }
      },
    }
  },
  sign(_config, secrets, { raw, id }) {
    const headers: Record<string, string> = {
      [SIGNATURE]: secrets
        .map((secret) => hmac('sha256', Buffer.from(secret), raw).toString('base64'))
        .join(','),
    }
    if (id !== undefined) headers[WEBHOOK_ID] = id
    return headers
  },
}
