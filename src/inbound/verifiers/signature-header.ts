import {
  decodeSignature,
  MAX_SIGNATURES_PER_HEADER,
  parseUnixSeconds,
  type SignatureEncoding,
} from './signatures.js'
import { type Rejection, reject } from './types.js'

/**
 * How many signature entries one header may carry. Each entry costs a constant-time comparison
 * against every configured secret, so an unbounded list lets one request buy unbounded work; a
 * sender rotating secrets lists two or three.
 */
export const MAX_SIGNATURE_ENTRIES = MAX_SIGNATURES_PER_HEADER

/** The shape of one provider's signature header. */
export interface SignatureHeaderFormat {
  /** The header's lower-case name, for messages. */
  name: string
  /** What separates entries: `,` (Stripe), `;` (Paddle), or a pattern (the generic scheme). */
  separator: string | RegExp
  /** Text an entry starts with to be a signature (`v1=`, `sha256=`, or `` for bare values). */
  signaturePrefix: string
  encoding: SignatureEncoding
  /** The key of a `key=<Unix seconds>` entry that must appear exactly once (Stripe `t`, Paddle `ts`). */
  timestampKey?: string
  /**
   * The message when the header holds nothing this scheme can use; by default the format spelled
   * out (`stripe-signature must be t=<unix seconds>,v1=<hex>[,v1=<hex>…]`).
   */
  malformedMessage?: string
  /** At most this many entries carrying the signature prefix; default MAX_SIGNATURE_ENTRIES. */
  maxEntries?: number
}

/** Bare base64 values, comma-joined while a secret is rotated or when a proxy merges headers. */
export function base64List(
  name: string,
): SignatureHeaderFormat & { separator: string; timestampKey?: undefined } {
  return { name, separator: ',', signaturePrefix: '', encoding: 'base64' }
}

export interface ParsedSignatureHeader<Timestamp> {
  kind: 'parsed'
  timestamp: Timestamp
  signatures: Buffer[]
}

/**
 * Reads one signature header. Entries are trimmed and empty ones skipped; an entry is a signature
 * only when it starts with the prefix exactly (no space inside), so a sender's weaker scheme listed
 * beside it (Stripe `v0`, GitHub `sha1`) is never verified. A signature that is not strict hex or
 * base64 is skipped, not coerced, and the header is malformed when none is left. A timestamp that is
 * not integer Unix seconds, or appears twice, makes the whole header malformed: with two, the
 * tolerance check could read one while the signature covers the other.
 */
export function parseSignatureHeader(
  header: string,
  format: SignatureHeaderFormat & { timestampKey: string },
): ParsedSignatureHeader<number> | Rejection
export function parseSignatureHeader(
  header: string,
  format: SignatureHeaderFormat & { timestampKey?: undefined },
): ParsedSignatureHeader<undefined> | Rejection
export function parseSignatureHeader(
  header: string,
  format: SignatureHeaderFormat,
): ParsedSignatureHeader<number | undefined> | Rejection
export function parseSignatureHeader(
  header: string,
  format: SignatureHeaderFormat,
): ParsedSignatureHeader<number | undefined> | Rejection {
  const malformed = reject('malformed_signature_header', format.malformedMessage ?? spelledOut(format))
  const maxEntries = format.maxEntries ?? MAX_SIGNATURE_ENTRIES
  const timestampPrefix = format.timestampKey === undefined ? undefined : `${format.timestampKey}=`
  let timestamp: number | undefined
  let timestamps = 0
  let entries = 0
  const signatures: Buffer[] = []
  for (const item of header.split(format.separator)) {
    const entry = item.trim()
    if (entry === '') continue
    if (timestampPrefix !== undefined && entry.startsWith(timestampPrefix)) {
      timestamps += 1
      timestamp = parseUnixSeconds(entry.slice(timestampPrefix.length))
      if (timestamps > 1 || timestamp === undefined) return malformed
    } else if (entry.startsWith(format.signaturePrefix)) {
      entries += 1
      if (entries > maxEntries) {
        return reject(
          'too_many_signatures',
          `${format.name} carries more than ${maxEntries} signatures; at most ${maxEntries} are accepted`,
        )
      }
      const decoded = decodeSignature(entry.slice(format.signaturePrefix.length), format.encoding)
      if (decoded !== undefined) signatures.push(decoded)
    }
  }
  if (signatures.length === 0) return malformed
  if (timestampPrefix !== undefined && timestamp === undefined) return malformed
  return { kind: 'parsed', timestamp, signatures }
}

function spelledOut({ name, separator, signaturePrefix, encoding, timestampKey }: SignatureHeaderFormat) {
  const signature = signaturePrefix === '' ? encoding : `${signaturePrefix}<${encoding}>`
  if (timestampKey === undefined) return `${name} must be ${signature}`
  const joiner = typeof separator === 'string' ? separator : ','
  return `${name} must be ${timestampKey}=<unix seconds>${joiner}${signature}[${joiner}${signature}…]`
}
