import { parseJsonBody, readEventIdAt, stringAt } from './body.js'
import { parseSignatureHeader, type SignatureHeaderFormat } from './signature-header.js'
import { anyMatch, checkTolerance, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256(secret, "{ts}:{body}")>`, with
 * one `h1` per active secret while a notification destination's secret is being rotated.
 */

const SIGNATURE = 'paddle-signature'

const FORMAT = {
  name: SIGNATURE,
  separator: ';',
  timestampKey: 'ts',
  signaturePrefix: 'h1=',
  encoding: 'hex',
} as const satisfies SignatureHeaderFormat

export const paddle: Scheme<'paddle'> = {
  name: 'paddle',
  // Live notifications are retried with backoff for about three days (sandbox: a few tries within
  // minutes).
  retryHorizonSeconds: 3 * 24 * 3600,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        if (header === undefined) return reject('missing_signature_headers', `expected a ${SIGNATURE} header`)
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const { timestamp, signatures } = parsed
        const outside = checkTolerance(timestamp, delivery.now, config.toleranceSeconds, `${SIGNATURE} ts`)
        if (outside !== undefined) return outside
        const expected = secrets.map((key) => hmac('sha256', key, `${timestamp}:`, delivery.raw))
        if (!anyMatch(expected, signatures)) {
          return reject('invalid_signature', 'no h1 signature matches any configured secret')
        }
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        const eventId = readEventIdAt(body.value, '/event_id')
        if (typeof eventId !== 'string') return eventId
        return {
          kind: 'verified',
          eventId,
          eventType: stringAt(body.value, '/event_type'),
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, [SIGNATURE]),
        }
      },
    }
  },
  sign(_config, secrets, { raw, timestamp }) {
    const signatures = secrets.map(
      (secret) => `h1=${hmac('sha256', Buffer.from(secret), `${timestamp}:`, raw).toString('hex')}`,
    )
    return { [SIGNATURE]: [`ts=${timestamp}`, ...signatures].join(';') }
  },
}
