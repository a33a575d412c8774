import { parseJsonBody, readEventId } from './body.js'
import { parseSignatureHeader, type SignatureHeaderFormat } from './signature-header.js'
import { anyMatch, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`. The legacy SHA-1
 * `X-Hub-Signature` is never consulted, even when it is the only one present. GitHub signs no
 * timestamp, so a captured delivery stays valid forever: replay protection rests on the ledger's
 * (source, X-GitHub-Delivery) key alone, for as long as rows are kept.
 */

const SIGNATURE = 'x-hub-signature-256'
const DELIVERY = 'x-github-delivery'
const EVENT = 'x-github-event'
const KEPT = [
  SIGNATURE,
  DELIVERY,
  EVENT,
  'x-github-hook-id',
  'x-github-hook-installation-target-id',
  'x-github-hook-installation-target-type',
]

// One value per header in practice; a comma list is accepted so that a proxy joining repeated
// headers does not break verification.
const FORMAT = {
  name: SIGNATURE,
  separator: ',',
  signaturePrefix: 'sha256=',
  encoding: 'hex',
} as const satisfies SignatureHeaderFormat

export const github: Scheme<'github'> = {
  name: 'github',
  // GitHub never redelivers on its own: a failed delivery is redelivered by hand or through its API.
  retryHorizonSeconds: 0,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        if (header === undefined) {
          return reject(
            'missing_signature_headers',
            `expected an ${SIGNATURE} header (sha1 signatures are not accepted)`,
          )
        }
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const expected = secrets.map((key) => hmac('sha256', key, delivery.raw))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'the signature matches no configured secret')
        }
        const eventId = readEventId(delivery.headers[DELIVERY], DELIVERY)
        if (typeof eventId !== 'string') return eventId
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        return {
          kind: 'verified',
          eventId,
          eventType: eventTypeOf(delivery.headers[EVENT], body.value),
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, KEPT),
        }
      },
    }
  },
  sign(_config, secrets, { raw, id }) {
    // GitHub sends one signature; several, comma-joined, are what a proxy merging headers produces.
    const headers: Record<string, string> = {
      [SIGNATURE]: secrets
        .map((secret) => `sha256=${hmac('sha256', Buffer.from(secret), raw).toString('hex')}`)
        .join(','),
    }
    if (id !== undefined) headers[DELIVERY] = id
    return headers
  },
}

/** `push`, or `pull_request.opened` when the body names an action. */
function eventTypeOf(event: string | undefined, body: unknown): string | null {
  if (event === undefined) return null
  const action =
    typeof body === 'object' && body !== null && 'action' in body && typeof body.action === 'string'
      ? body.action
      : undefined
  return action === undefined ? event : `${event}.${action}`
}
