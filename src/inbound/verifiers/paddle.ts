import { z } from 'zod'
import { parseJsonBody, readEventIdAt, stringAt } from './body.js'
import { secretsField, toleranceField } from './config-fields.js'
import {
  anyMatch,
  checkTolerance,
  decodeSignature,
  hmac,
  keepHeaders,
  loadSecrets,
  parseUnixSeconds,
  signatureEntries,
} from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256(secret, "{ts}:{body}")>`, with
 * one `h1` per active secret while a notification destination's secret is being rotated.
 */
const configSchema = z.object({
  scheme: z.literal('paddle'),
  secrets: secretsField,
  toleranceSeconds: toleranceField,
})

const SIGNATURE = 'paddle-signature'

export const paddle: Scheme<'paddle', typeof configSchema> = {
  name: 'paddle',
  configSchema,
  // Live notifications are retried with backoff for about three days (sandbox: a few tries within
  // minutes).
  retryHorizonSeconds: 3 * 24 * 3600,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        if (header === undefined) return reject('missing_signature_headers', `expected a ${SIGNATURE} header`)
        const entries = signatureEntries(header, ';', SIGNATURE)
        if (!Array.isArray(entries)) return entries
        let timestamp: number | undefined
        let timestamps = 0
        const signatures: Buffer[] = []
        for (const item of entries) {
          const equals = item.indexOf('=')
          if (equals < 0) continue
          const key = item.slice(0, equals).trim()
          const value = item.slice(equals + 1).trim()
          if (key === 'ts') {
            timestamps += 1
            timestamp = parseUnixSeconds(value)
          } else if (key === 'h1') {
            const decoded = decodeSignature(value, 'hex')
            if (decoded !== undefined) signatures.push(decoded)
          }
        }
        if (timestamp === undefined || timestamps !== 1 || signatures.length === 0) {
          return reject(
            'malformed_signature_header',
            `${SIGNATURE} must be ts=<unix seconds>;h1=<hex>[;h1=<hex>…]`,
          )
        }
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
