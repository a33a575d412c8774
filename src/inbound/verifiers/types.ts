import type { z } from 'zod'

/** What a verifier sees of one delivery: the exact bytes and the lower-cased headers. */
export interface Delivery {
  raw: Uint8Array
  headers: Readonly<Record<string, string>>
  /** Milliseconds since the epoch; injected so tolerance checks are testable. */
  now: number
}

/** The reasons a delivery is turned away before anything touches the ledger. */
export type RejectionCode =
  | 'missing_signature_headers'
  | 'malformed_signature_header'
  | 'too_many_signatures'
  | 'invalid_signature'
  | 'timestamp_out_of_tolerance'
  | 'missing_event_id'
  | 'invalid_event_id'
  | 'invalid_json'
  | 'invalid_body'

export type Verification =
  | {
      kind: 'verified'
      /** The provider's id for this event: the ledger's dedup key, never empty. */
      eventId: string
      eventType: string | null
      /** The parsed body, or the raw text for bodies that are not JSON. */
      event: unknown
      /** The headers worth keeping on the row (signature, id and provider metadata). */
      keptHeaders: Record<string, string>
    }
  /** A provider handshake (Slack's url_verification): answered directly, never recorded. */
  | { kind: 'handshake'; body: unknown }
  | { kind: 'rejected'; code: RejectionCode; message: string }

export interface Verifier {
  verify(delivery: Delivery): Verification
}

/** Resolves a secret reference from the config file (`env:NAME` or a literal). */
export type SecretResolver = (reference: string, field: string) => string

/** What a sender puts on one delivery, for `sign`: the bytes plus the values the signature covers. */
export interface SigningInput {
  raw: Uint8Array
  /** Unix seconds; schemes without a timestamp ignore it. */
  timestamp: number
  /** The event id for schemes that carry it in a header (Standard Webhooks, GitHub, Shopify, hmac). */
  id: string | undefined
}

/** One signature scheme: its config schema, a factory that validates secrets at start-up, and a signer. */
export interface Scheme<Name extends string, Schema extends z.ZodType> {
  name: Name
  configSchema: Schema
  /**
   * How long the provider keeps retrying a delivery that failed, in seconds (0: never on its own;
   * null: unknown). Each retry is signed afresh, so dedup has to last at least this long: a retention
   * shorter than this lets a late retry in as a new event.
   */
  retryHorizonSeconds: number | null
  create(config: z.infer<Schema>, context: { sourceId: string; resolveSecret: SecretResolver }): Verifier
  /**
   * The headers the provider would send for `input`, signed with every one of `secrets` (resolved
   * values, not references), as a sender does while a secret is being rotated. For tests and replay.
   */
  sign(config: z.infer<Schema>, secrets: readonly string[], input: SigningInput): Record<string, string>
}

export type Rejection = Extract<Verification, { kind: 'rejected' }>

export function reject(code: RejectionCode, message: string): Rejection {
  return { kind: 'rejected', code, message }
}
