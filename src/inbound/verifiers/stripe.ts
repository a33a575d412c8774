import { ConfigError } from '../../config/errors.js'
import { parseJsonBody, readEventIdAt } from './body.js'
import { parseSignatureHeader, type SignatureHeaderFormat } from './signature-header.js'
import { anyMatch, checkTolerance, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, HMAC-SHA256 over `{t}.{body}`. The `whsec_`
 * secret is used as its literal bytes — unlike Standard Webhooks it is not base64-decoded.
 */

const HEADER = 'stripe-signature'

/**
 * `t` and every `v1`. `v0` and unknown schemes are ignored, never verified: accepting a weaker scheme
 * the sender also lists would let an attacker downgrade to it.
 */
const FORMAT = {
  name: HEADER,
  separator: ',',
  timestampKey: 't',
  signaturePrefix: 'v1=',
  encoding: 'hex',
} as const satisfies SignatureHeaderFormat

export const stripe: Scheme<'stripe'> = {
  name: 'stripe',
  // Live mode retries with exponential backoff for up to three days.
  retryHorizonSeconds: 3 * 24 * 3600,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret, index) => {
      // An API key pasted in place of the endpoint's signing secret is the usual mistake; every
      // Stripe signing secret (dashboard or `stripe listen`) starts with whsec_.
      if (!secret.startsWith('whsec_')) {
        throw new ConfigError(`verify.secrets[${index}]: a Stripe signing secret starts with whsec_`)
      }
      return Buffer.from(secret, 'utf8')
    })
    return {
      verify(delivery) {
        const header = delivery.headers[HEADER]
        if (header === undefined) return reject('missing_signature_headers', `expected a ${HEADER} header`)
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const outside = checkTolerance(parsed.timestamp, delivery.now, config.toleranceSeconds, `${HEADER} t`)
        if (outside !== undefined) return outside
        const expected = secrets.map((key) => hmac('sha256', key, `${parsed.timestamp}.`, delivery.raw))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'no v1 signature matches any configured secret')
        }
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        const eventId = readEventIdAt(body.value, '/id')
        if (typeof eventId !== 'string') return eventId
        return {
          kind: 'verified',
          eventId,
          eventType: body.type,
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, [HEADER]),
        }
      },
    }
  },
  sign(_config, secrets, { raw, timestamp }) {
    const signatures = secrets.map(
      (secret) => `v1=${hmac('sha256', Buffer.from(secret), `${timestamp}.`, raw).toString('hex')}`,
    )
    return { 'stripe-signature': [`t=${timestamp}`, ...signatures].join(',') }
  },
}
