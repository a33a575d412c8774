import { z } from 'zod'
import { parseJsonBody, readEventId } from './body.js'
import { secretsField } from './config-fields.js'
import { anyMatch, decodeSignature, hmac, keepHeaders, loadSecrets, signatureEntries } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`. The legacy SHA-1
 * `X-Hub-Signature` is never consulted, even when it is the only one present. GitHub signs no
 * timestamp, so a captured delivery stays valid forever: replay protection rests on the ledger's
 * (source, X-GitHub-Delivery) key alone, for as long as rows are kept.
 */
const configSchema = z.object({
  scheme: z.literal('github'),
  secrets: secretsField,
})

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

export const github: Scheme<'github', typeof configSchema> = {
  name: 'github',
  configSchema,
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
        // One value per header in practice; a comma list is accepted so that a proxy joining
        // repeated headers does not break verification.
        const entries = signatureEntries(header, ',', SIGNATURE)
        if (!Array.isArray(entries)) return entries
        const signatures: Buffer[] = []
        for (const value of entries) {
          if (!value.startsWith('sha256=')) continue
          const decoded = decodeSignature(value.slice('sha256='.length), 'hex')
          if (decoded !== undefined) signatures.push(decoded)
        }
        if (signatures.length === 0)
          return reject('malformed_signature_header', `${SIGNATURE} must be sha256=<hex>`)
        const expected = secrets.map((key) => hmac('sha256', key, delivery.raw))
        if (!anyMatch(expected, signatures)) {
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
