import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'

/**
 * sha256 (hex) of the RFC 8785 canonical JSON of `args`: key order, whitespace and number spelling
 * never make one intended action look like another, so the same key with the same arguments always
 * hashes alike and any real change of arguments is a payload conflict.
 */
export function payloadHash(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args)).digest('hex')
}

/** Canonical JSON text; throws a TypeError for values JSON cannot carry (undefined, NaN, cycles). */
export function canonicalJson(args: unknown): string {
  let text: string | undefined
  try {
    text = canonicalize(args)
  } catch (error) {
    throw new TypeError(
      `tool arguments are not JSON: ${error instanceof Error ? error.message : String(error)}`,
    )
  }
  if (text === undefined) throw new TypeError('tool arguments are not JSON (undefined)')
  return text
}
