import { createHmac, timingSafeEqual } from 'node:crypto'
import { z } from 'zod'
import { parseJsonBody, readEventId } from './body.js'
import { ConfigError, type Delivery, reject, type Scheme, type Verification } from './types.js'

/**
 * Standard Webhooks v1 (HMAC-SHA256 over `{id}.{timestamp}.{body}`), also sent by Svix-powered
 * senders under `svix-*` header names. The `standardwebhooks` package hard-codes a ±300 s tolerance
 * and holds one secret per instance, so the timestamp, rotation and header parsing live here and the
 * HMAC comes from node:crypto (the tests cross-check every signature against `standardwebhooks` and
 * `svix`).
 */
const configSchema = z.object({
  scheme: z.literal('standard-webhooks'),
  secrets: z.array(z.string().min(1)).min(1, 'needs at least one secret'),
  toleranceSeconds: z
    .number()
    .int()
    .min(1)
    .max(7 * 24 * 3600)
    .default(300),
})

const HEADER_SETS = [
  { id: 'webhook-id', timestamp: 'webhook-timestamp', signature: 'webhook-signature' },
  { id: 'svix-id', timestamp: 'svix-timestamp', signature: 'svix-signature' },
] as const

const MIN_SECRET_BYTES = 16

/** Decodes a `whsec_<base64>` secret; refuses what would silently decode to a short or empty key. */
export function decodeStandardWebhooksSecret(secret: string, field: string): Buffer {
  const encoded = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 === 1) {
    throw new ConfigError(`${field}: not a base64 Standard Webhooks secret (expected whsec_<base64>)`)
  }
  const key = Buffer.from(encoded, 'base64')
  if (key.length < MIN_SECRET_BYTES) {
    throw new ConfigError(`${field}: decodes to ${key.length} bytes; a Standard Webhooks secret has 24 to 64`)
  }
  return key
}

/** base64 HMAC-SHA256 of the signed content, as it appears after `v1,`. */
export function signStandardWebhooks(key: Buffer, id: string, timestamp: number, raw: Uint8Array): string {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(raw).digest('base64')
}

export const standardWebhooks: Scheme<'standard-webhooks', typeof configSchema> = {
  name: 'standard-webhooks',
  configSchema,
  create(config, { resolveSecret }) {
    const keys = config.secrets.map((reference, index) =>
      decodeStandardWebhooksSecret(
        resolveSecret(reference, `verify.secrets[${index}]`),
        `verify.secrets[${index}]`,
      ),
    )
    const toleranceMs = config.toleranceSeconds * 1000
    return {
      verify(delivery: Delivery): Verification {
        const names = HEADER_SETS.find((set) => delivery.headers[set.id] !== undefined) ?? HEADER_SETS[0]
        const id = delivery.headers[names.id]
        const timestampText = delivery.headers[names.timestamp]
        const signatureText = delivery.headers[names.signature]
        if (id === undefined || timestampText === undefined || signatureText === undefined) {
          return reject(
            'missing_signature_headers',
            `expected ${names.id}, ${names.timestamp} and ${names.signature} headers`,
          )
        }
        const eventId = readEventId(id, names.id)
        if (typeof eventId !== 'string') return eventId
        if (!/^\d{1,12}$/.test(timestampText)) {
          return reject('malformed_signature_header', `${names.timestamp} must be integer Unix seconds`)
        }
        const signatures = parseSignatures(signatureText)
        if (signatures.length === 0) {
          return reject(
            'malformed_signature_header',
            `${names.signature} holds no signature of the form v1,<base64>`,
          )
        }
        const timestamp = Number(timestampText)
        if (Math.abs(delivery.now - timestamp * 1000) > toleranceMs) {
          return reject(
            'timestamp_out_of_tolerance',
            `${names.timestamp} is more than ${config.toleranceSeconds} s from the server's clock`,
          )
        }
        const matched = keys.some((key) => {
          const expected = Buffer.from(signStandardWebhooks(key, id, timestamp, delivery.raw), 'base64')
          return signatures.some(
            (candidate) => candidate.length === expected.length && timingSafeEqual(candidate, expected),
          )
        })
        if (!matched) return reject('invalid_signature', 'no signature matches any configured secret')
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        return {
          kind: 'verified',
          eventId,
          eventType: body.type,
          event: body.value,
          keptHeaders: {
            [names.id]: id,
            [names.timestamp]: timestampText,
            [names.signature]: signatureText,
          },
        }
      },
    }
  },
}

/** The v1 entries of a space-separated signature list; other versions (v1a is ed25519) are skipped. */
function parseSignatures(header: string): Buffer[] {
  const found: Buffer[] = []
  for (const entry of header.split(' ')) {
    const comma = entry.indexOf(',')
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue
    const encoded = entry.slice(comma + 1)
    if (/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) found.push(Buffer.from(encoded, 'base64'))
  }
  return found
}
