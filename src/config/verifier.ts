import type { SecretResolver } from './secrets.js'

/**
 * The contract a source's verifier meets. A Source (./config.ts) carries one, built at start-up from
 * its `verify` block by src/inbound/verifiers; the HTTP edge maps its rejections to status codes.
 */

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

/** What building a verifier is given besides the source's verify block. */
export interface VerifierContext {
  sourceId: string
  resolveSecret: SecretResolver
}
