/** What `ledger.invoke` answers: the core's outcome, mapped to HTTP only at the edge. */
export type InvokeOutcome<R = unknown> =
  /** It happened; `replayed` when this call ran nothing and returns the stored result. */
  | { kind: 'completed'; operationId: string; result: R; downstreamId: string | null; replayed: boolean }
  /** Another caller holds a live lease on this key. */
  | { kind: 'retry_later'; operationId: string; retryAfterMs: number }
  /** The key was used before with other arguments (or another tool); nothing ran. */
  | { kind: 'payload_conflict'; operationId: string; message: string }
  /** Unknown whether it happened; reconciliation will ask the external system. Never "failed". */
  | { kind: 'needs_reconciliation'; operationId: string; reason: string }
  /** Reconciliation could not settle it: a human decides (see `hookledger approvals`). */
  | { kind: 'awaiting_approval'; operationId: string; approvalId: string | null }
  /** An idempotent tool's bounded retries ran out; invoking again starts a new bounded round. */
  | { kind: 'exhausted'; operationId: string; attempts: number; error: string; details: unknown }
  /** Definitely did not happen: rejected, every attempt undone, or compensated by a saga abort. */
  | {
      kind: 'failed'
      operationId: string
      reason: 'rejected' | 'undone' | 'compensated'
      error: string
      details: unknown
    }
  /** A human abandoned it; nothing runs it again. */
  | { kind: 'abandoned'; operationId: string }
