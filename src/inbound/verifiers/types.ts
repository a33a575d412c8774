import type { RejectionCode, Verification, Verifier, VerifierContext } from '../../config/verifier.js'
import type { SchemeName, VerifyConfigOf } from '../../config/verify.js'

/** What a sender puts on one delivery, for `sign`: the bytes plus the values the signature covers. */
export interface SigningInput {
  raw: Uint8Array
  /** Unix seconds; schemes without a timestamp ignore it. */
  timestamp: number
  /** The event id for schemes that carry it in a header (Standard Webhooks, GitHub, Shopify, hmac). */
  id: string | undefined
}

/**
 * One signature scheme: a factory that validates secrets at start-up, and a signer. Its config
 * schema is part of the config file's (src/config/verify.ts).
 */
export interface Scheme<Name extends SchemeName> {
  name: Name
  /**
   * How long the provider keeps retrying a delivery that failed, in seconds (0: never on its own;
   * null: unknown). Each retry is signed afresh, so dedup has to last at least this long: a retention
   * shorter than this lets a late retry in as a new event.
   */
  retryHorizonSeconds: number | null
  create(config: VerifyConfigOf<Name>, context: VerifierContext): Verifier
  /**
   * The headers the provider would send for `input`, signed with every one of `secrets` (resolved
   * values, not references), as a sender does while a secret is being rotated. For tests and replay.
   */
  sign(config: VerifyConfigOf<Name>, secrets: readonly string[], input: SigningInput): Record<string, string>
}

export type Rejection = Extract<Verification, { kind: 'rejected' }>

export function reject(code: RejectionCode, message: string): Rejection {
  return { kind: 'rejected', code, message }
}
