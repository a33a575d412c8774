import { parseJsonBody, readEventIdAt, stringAt } from './body.js'
import { base64List, parseSignatureHeader } from './signature-header.js'
import { anyMatch, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Square: `X-Square-HmacSha256-Signature: base64(HMAC-SHA256(signature key, notificationUrl + body))`.
 * The URL is the one registered with Square, configured here because a proxy or load balancer in
 * front of hookledger rewrites what the request line says. Square signs no timestamp: replays are
 * stopped by the ledger's (source, event_id) key.
 */

const SIGNATURE = 'x-square-hmacsha256-signature'
const KEPT = [SIGNATURE, 'square-initial-delivery-timestamp', 'square-retry-number', 'square-retry-reason']

const FORMAT = base64List(SIGNATURE)

export const square: Scheme<'square'> = {
  name: 'square',
  // Retried for up to 72 hours after the event.
  retryHorizonSeconds: 72 * 3600,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        if (header === undefined)
          return reject('missing_signature_headers', `expected an ${SIGNATURE} header`)
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const expected = secrets.map((key) => hmac('sha256', key, config.notificationUrl, delivery.raw))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'the signature matches no configured key and notification URL')
        }
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        const eventId = readEventIdAt(body.value, '/event_id')
        if (typeof eventId !== 'string') return eventId
        return {
          kind: 'verified',
          eventId,
          eventType: stringAt(body.value, '/type'),
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, KEPT),
        }
      },
    }
  },
  sign(config, secrets, { raw }) {
    const signatures = secrets.map((secret) =>
      hmac('sha256', Buffer.from(secret), config.notificationUrl, raw).toString('base64'),
    )
    return { [SIGNATURE]: signatures.join(',') }
  },
}
