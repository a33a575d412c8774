import { createHmac, timingSafeEqual } from 'node:crypto'
import { ConfigError } from '../../config/errors.js'
import type { SecretResolver } from '../../config/secrets.js'
import type { Verification } from '../../config/verifier.js'
import { reject } from './types.js'

/** Helpers every HMAC scheme shares: secret loading, strict decoding, constant-time matching. */

export type HmacAlgorithm = 'sha256' | 'sha512'
export type SignatureEncoding = 'hex' | 'base64'

/**
 * Resolves each secret reference and refuses an empty value: an HMAC key of zero bytes is valid
 * crypto, so an unset secret would otherwise verify signatures anyone can compute.
 */
export function loadSecrets(references: readonly string[], resolveSecret: SecretResolver): string[] {
  return references.map((reference, index) => {
    const field = `verify.secrets[${index}]`
    const value = resolveSecret(reference, field)
    if (value.trim() === '') throw new ConfigError(`${field}: the secret is empty`)
    return value
  })
}

export function hmac(algorithm: HmacAlgorithm, key: Uint8Array, ...parts: (string | Uint8Array)[]): Buffer {
  const mac = createHmac(algorithm, key)
  for (const part of parts) mac.update(part)
  return mac.digest()
}

const HEX = /^(?:[0-9a-fA-F]{2})+$/
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2,3})?$/

/**
 * Decodes a signature strictly. Buffer.from silently drops characters it does not understand, which
 * would turn a garbled header into a short, wrong value instead of a clear "malformed" answer.
 */
export function decodeSignature(text: string, encoding: SignatureEncoding): Buffer | undefined {
  if (text === '') return undefined
  if (encoding === 'hex') return HEX.test(text) ? Buffer.from(text, 'hex') : undefined
  return BASE64.test(text) ? Buffer.from(text, 'base64') : undefined
}

/**
 * True when any candidate equals any expected value. Each comparison is constant-time; lengths are
 * compared first because they are public (the digest size), and timingSafeEqual requires them equal.
 */
export function anyMatch(expected: readonly Buffer[], candidates: readonly Buffer[]): boolean {
  let matched = false
  for (const want of expected) {
    for (const candidate of candidates) {
      if (candidate.length === want.length && timingSafeEqual(candidate, want)) matched = true
    }
  }
  return matched
}

/**
 * The most entries one signature header may list. Senders list one signature per secret they sign
 * with (two or three during a rotation); the cap keeps a forged header from buying one verification
 * per entry (an ed25519 check costs about 0.3 ms, so 170 entries were 170 of them).
 */
export const MAX_SIGNATURES_PER_HEADER = 16

/**
 * The non-empty entries of a signature list, or a `too_many_signatures` rejection: counted before
 * anything is decoded or verified, so the work a forged header causes is bounded.
 */
export function signatureEntries(
  header: string,
  separator: string | RegExp,
  name: string,
): string[] | Extract<Verification, { kind: 'rejected' }> {
  const entries = header
    .split(separator)
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '')
  if (entries.length > MAX_SIGNATURES_PER_HEADER) {
    return {
      kind: 'rejected',
      code: 'too_many_signatures',
      message: `${name} lists ${entries.length} entries; at most ${MAX_SIGNATURES_PER_HEADER} are accepted`,
    }
  }
  return entries
}

/** Parses integer Unix seconds; anything else (`123abc`, `1e9`, empty) is malformed, never coerced. */
export function parseUnixSeconds(text: string): number | undefined {
  return /^\d{1,12}$/.test(text) ? Number(text) : undefined
}

/** Rejects a timestamp farther than `toleranceSeconds` from the server's clock, in either direction. */
export function checkTolerance(
  timestamp: number,
  now: number,
  toleranceSeconds: number,
  header: string,
): Verification | undefined {
  if (Math.abs(now - timestamp * 1000) > toleranceSeconds * 1000) {
    return reject(
      'timestamp_out_of_tolerance',
      `${header} is more than ${toleranceSeconds} s from the server's clock`,
    )
  }
  return undefined
}

/** Copies the named headers that are present, under their lower-case names. */
export function keepHeaders(headers: Readonly<Record<string, string>>, names: readonly string[]) {
  const kept: Record<string, string> = {}
  for (const name of names) {
    const value = headers[name]
    if (value !== undefined) kept[name] = value
  }
  return kept
}
