import { assertNever } from '../assert.js'
import type { AttemptStatus, EffectClass, OperationStatus } from '../db/outbound-schema.js'

/** What the ledger knows when it holds an operation's lease. */
export interface DecisionInput {
  effect: EffectClass
  /** The newest attempt, absent before the first call. */
  last: { status: AttemptStatus; hasUndoRef: boolean } | undefined
  /** Attempts started in this round (the cap counts these). */
  roundAttempts: number
  maxAttempts: number
  /** The lease was taken on a human's `retry` decision (bound to these arguments). */
  approved: boolean
}

export type Step =
  /** Send (again). `closeLast` first settles an attempt a crashed worker left in flight. */
  | { kind: 'execute'; closeLast: 'unknown' | 'not_sent' | null }
  /** Run the recorded undo of the newest attempt, with that attempt's key. */
  | { kind: 'undo'; closeLast: 'unknown' | null }
  | { kind: 'needs_reconciliation'; reason: string; closeLast: 'unknown' | null }
  /** An idempotent tool's bounded round is over: surface the error, never loop. */
  | { kind: 'exhausted'; closeLast: 'unknown' | null }
  /** Definitely did not happen: every attempt was undone, and the cap is reached. */
  | { kind: 'failed'; reason: string }

/**
 * The source document's decision table, as one pure function, used for a first call, after an
 * unknown outcome, and when a lease expired (an abandoned worker: the crash window).
 *
 * - idempotent: re-execute with the same key, bounded by the round's cap.
 * - compensable: run the undo of an attempt that may have landed; only once it is committed, execute
 *   under a new key. An attempt still in flight without an undo reference was never sent (the
 *   reference is committed before the call), so it is simply superseded. An unknown outcome without
 *   an undo reference (an agent reported it without recording one) cannot be undone: someone has to
 *   look, so it goes to reconciliation.
 * - irreversible: an attempt that may have landed is never re-executed automatically: it goes to
 *   reconciliation, unless a human approved exactly one more execution.
 */
export function decide(input: DecisionInput): Step {
  const { effect, last, roundAttempts, maxAttempts, approved } = input
  const capReached = roundAttempts >= maxAttempts
  if (last === undefined || last.status === 'not_sent') return { kind: 'execute', closeLast: null }
  switch (last.status) {
    case 'in_flight':
    case 'unknown': {
      const closeLast = last.status === 'in_flight' ? ('unknown' as const) : null
      if (effect === 'compensable' && last.status === 'in_flight' && !last.hasUndoRef) {
        return { kind: 'execute', closeLast: 'not_sent' }
      }
      switch (effect) {
        case 'idempotent':
          return capReached ? { kind: 'exhausted', closeLast } : { kind: 'execute', closeLast }
        case 'compensable':
          return last.hasUndoRef
            ? { kind: 'undo', closeLast }
            : { kind: 'needs_reconciliation', reason: 'unknown_without_undo_ref', closeLast }
        case 'irreversible':
          return approved
            ? { kind: 'execute', closeLast }
            : { kind: 'needs_reconciliation', reason: 'unknown_outcome', closeLast }
        default:
          return assertNever(effect)
      }
    }
    case 'compensated':
      return capReached
        ? { kind: 'failed', reason: `all ${roundAttempts} attempts were undone` }
        : { kind: 'execute', closeLast: null }
    case 'undo_failed':
      return approved
        ? { kind: 'undo', closeLast: null }
        : { kind: 'needs_reconciliation', reason: 'undo_failed', closeLast: null }
    case 'succeeded':
    case 'rejected':
      // Such an operation is completed or failed and is never leased; reaching here is a bug.
      throw new Error(`decision table reached with a settled attempt (${last.status})`)
    default:
      return assertNever(last.status)
  }
}

/**
 * The operation's status after a human's decision on an approval. On an `execute` question, retry
 * opens one more round for these arguments, record_success completes it, abandon stops it. On an
 * `undo` question (a failed compensation), retry puts it back as completed so the undo runs again,
 * record_success says the undo happened, and abandon leaves the effect in place.
 */
export function nextStatusOnDecision(
  action: 'execute' | 'undo',
  decision: 'retry' | 'record_success' | 'abandon',
): OperationStatus {
  switch (decision) {
    case 'retry':
      return action === 'undo' ? 'completed' : 'retry_approved'
    case 'record_success':
      return action === 'undo' ? 'compensated' : 'completed'
    case 'abandon':
      return action === 'undo' ? 'completed' : 'abandoned'
    default:
      return assertNever(decision)
  }
}
