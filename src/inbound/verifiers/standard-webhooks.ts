import {
  createPrivateKey,
  createPublicKey,
  type KeyObject,
  randomBytes,
  sign as signEd25519,
  verify as verifyEd25519,
} from 'node:crypto'
import { ConfigError } from '../../config/errors.js'
import type { Delivery, Verification } from '../../config/verifier.js'
import { parseJsonBody, readEventId } from './body.js'
import { anyMatch, decodeSignature, hmac, signatureEntries } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Standard Webhooks v1 (HMAC-SHA256 over `{id}.{timestamp}.{body}`) and v1a (ed25519 over the same
 * content), also sent by Svix-powered senders under `svix-*` header names. The `standardwebhooks`
 * package hard-codes a ±300 s tolerance, holds one secret per instance and skips v1a entries, so the
 * timestamp, rotation, header parsing and both signature versions live here on node:crypto (the tests
 * cross-check v1 against `standardwebhooks` and `svix`, and v1a against node's own ed25519 keys).
 */

const HEADER_SETS = [
  { id: 'webhook-id', timestamp: 'webhook-timestamp', signature: 'webhook-signature' },
  { id: 'svix-id', timestamp: 'svix-timestamp', signature: 'svix-signature' },
] as const

const MIN_SECRET_BYTES = 16
const ED25519_SIGNATURE_BYTES = 64

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

// DER headers that wrap a raw 32-byte ed25519 key as SPKI (public) or PKCS#8 (private), the forms
// node:crypto imports.
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex')
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex')

function decodeKeyBytes(text: string, prefix: string, field: string): Buffer {
  const bytes = decodeSignature(text.slice(prefix.length), 'base64')
  if (bytes === undefined) throw new ConfigError(`${field}: not base64 after ${prefix}`)
  return bytes
}

/** Imports a `whpk_<base64 32-byte ed25519 public key>`. */
export function decodeStandardWebhooksPublicKey(text: string, field: string): KeyObject {
  const raw = decodeKeyBytes(text, 'whpk_', field)
  if (raw.length !== 32) throw new ConfigError(`${field}: a whpk_ key holds 32 bytes, this one ${raw.length}`)
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519, raw]), format: 'der', type: 'spki' })
}

/**
 * Imports a `whsk_` signing key: the 32-byte seed, or the 64-byte seed-plus-public-key form that
 * libsodium and the Svix server write. The public half, when present, must match the seed.
 */
export function decodeStandardWebhooksSigningKey(text: string, field: string): KeyObject {
  const raw = decodeKeyBytes(text, 'whsk_', field)
  if (raw.length !== 32 && raw.length !== 64) {
    throw new ConfigError(`${field}: a whsk_ key holds 32 or 64 bytes, this one ${raw.length}`)
  }
  const key = createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519, raw.subarray(0, 32)]),
    format: 'der',
    type: 'pkcs8',
  })
  if (raw.length === 64 && !rawPublicKey(createPublicKey(key)).equals(raw.subarray(32))) {
    throw new ConfigError(`${field}: the public half of the whsk_ key does not belong to its seed`)
  }
  return key
}

function rawPublicKey(key: KeyObject): Buffer {
  return key.export({ format: 'der', type: 'spki' }).subarray(SPKI_ED25519.length)
}

/** The `whpk_` public key that verifies what a `whsk_` key signs (give this one to receivers). */
export function standardWebhooksPublicKeyOf(signingKey: string): string {
  const key = decodeStandardWebhooksSigningKey(signingKey, 'signing key')
  return `whpk_${rawPublicKey(createPublicKey(key)).toString('base64')}`
}

/** A fresh ed25519 key pair in Standard Webhooks' serialization. */
export function generateStandardWebhooksKeyPair(): { signingKey: string; publicKey: string } {
  const signingKey = `whsk_${randomBytes(32).toString('base64')}`
  return { signingKey, publicKey: standardWebhooksPublicKeyOf(signingKey) }
}

/** base64 HMAC-SHA256 of the signed content, as it appears after `v1,`. */
export function signStandardWebhooks(key: Buffer, id: string, timestamp: number, raw: Uint8Array): string {
  return hmac('sha256', key, `${id}.${timestamp}.`, raw).toString('base64')
}

function signedContent(id: string, timestamp: number, raw: Uint8Array): Buffer {
  return Buffer.concat([Buffer.from(`${id}.${timestamp}.`), raw])
}

type Key = { kind: 'hmac'; key: Buffer } | { kind: 'ed25519'; key: KeyObject }

function loadKey(secret: string, field: string): Key {
  if (secret.startsWith('whpk_'))
    return { kind: 'ed25519', key: decodeStandardWebhooksPublicKey(secret, field) }
  if (secret.startsWith('whsk_')) {
    // The receiver only needs the public key; keeping the signing key here would let anyone who
    // reads this config forge deliveries, which is what v1a exists to prevent.
    throw new ConfigError(`${field}: is a whsk_ signing key; configure its whpk_ public key instead`)
  }
  return { kind: 'hmac', key: decodeStandardWebhooksSecret(secret, field) }
}

export const standardWebhooks: Scheme<'standard-webhooks'> = {
  name: 'standard-webhooks',
  // Svix: 8 attempts over about 27.6 h; the spec's example schedule runs about 75.6 h. The longer one
  // bounds what a Standard Webhooks sender may do.
  retryHorizonSeconds: 75 * 3600 + 35 * 60 + 5,
  create(config, { resolveSecret }) {
    const keys = config.secrets.map((reference, index) =>
      loadKey(resolveSecret(reference, `verify.secrets[${index}]`), `verify.secrets[${index}]`),
    )
    const hmacKeys = keys.flatMap((key) => (key.kind === 'hmac' ? [key.key] : []))
    const publicKeys = keys.flatMap((key) => (key.kind === 'ed25519' ? [key.key] : []))
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
        const entries = signatureEntries(signatureText, ' ', names.signature)
        if (!Array.isArray(entries)) return entries
        const signatures = parseSignatures(entries)
        if (signatures.v1.length === 0 && signatures.v1a.length === 0) {
          return reject(
            'malformed_signature_header',
            `${names.signature} holds no signature of the form v1,<base64> or v1a,<base64>`,
          )
        }
        const timestamp = Number(timestampText)
        if (Math.abs(delivery.now - timestamp * 1000) > toleranceMs) {
          return reject(
            'timestamp_out_of_tolerance',
            `${names.timestamp} is more than ${config.toleranceSeconds} s from the server's clock`,
          )
        }
        const expected = hmacKeys.map((key) => hmac('sha256', key, `${id}.${timestamp}.`, delivery.raw))
        let matched = signatures.v1.length > 0 && anyMatch(expected, signatures.v1)
        if (!matched && signatures.v1a.length > 0 && publicKeys.length > 0) {
          const content = signedContent(id, timestamp, delivery.raw)
          matched = publicKeys.some((key) =>
            signatures.v1a.some((signature) => verifyEd25519(null, content, key, signature)),
          )
        }
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
  sign(_config, secrets, { raw, timestamp, id }) {
    const messageId = id ?? `msg_${randomBytes(12).toString('base64url')}`
    const signatures = secrets.map((secret, index) => {
      const field = `secrets[${index}]`
      if (secret.startsWith('whsk_')) {
        const key = decodeStandardWebhooksSigningKey(secret, field)
        return `v1a,${signEd25519(null, signedContent(messageId, timestamp, raw), key).toString('base64')}`
      }
      if (secret.startsWith('whpk_')) {
        throw new ConfigError(`${field}: a whpk_ public key only verifies; signing v1a needs its whsk_ key`)
      }
      return `v1,${signStandardWebhooks(decodeStandardWebhooksSecret(secret, field), messageId, timestamp, raw)}`
    })
    return {
      'webhook-id': messageId,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatures.join(' '),
    }
  },
}

/**
 * The v1 (HMAC) and v1a (ed25519) entries of a space-separated signature list. Entries of other
 * versions, and entries that do not decode, are skipped: a sender may add versions we do not know.
 */
function parseSignatures(entries: readonly string[]): { v1: Buffer[]; v1a: Buffer[] } {
  const found = { v1: [] as Buffer[], v1a: [] as Buffer[] }
  for (const entry of entries) {
    const comma = entry.indexOf(',')
    if (comma < 0) continue
    const version = entry.slice(0, comma)
    const decoded = decodeSignature(entry.slice(comma + 1), 'base64')
    if (decoded === undefined) continue
    if (version === 'v1') found.v1.push(decoded)
    if (version === 'v1a' && decoded.length === ED25519_SIGNATURE_BYTES) found.v1a.push(decoded)
  }
  return found
}
