import type { Database } from '../db/client.js'
import type { Held, OperationRow } from '../db/operation-rows.js'
import { settleByEvidence } from '../db/operations.js'
import type { InvokeOutcome } from './outcomes.js'

// Evidence closed as superseded or not applicable lets the next one for the key apply; an operation
// has few events.
const MAX_EVIDENCE_PER_SETTLE = 16

/**
 * Applies the evidence inbound events left for `key`, if its outcome is unknown now. Called where an
 * outcome becomes unknown (the evidence may have come first), by the worker when an event arrives,
 * and by the reconciler's sweep (a crash between the two). Undefined when nothing settled it.
 */
export async function settleFromEvidence(
  db: Database,
  target: { key: string; leaseToken?: string | undefined },
): Promise<OperationRow | undefined> {
  for (let round = 0; round < MAX_EVIDENCE_PER_SETTLE; round += 1) {
    const settled = await settleByEvidence(db, target)
    if (settled.kind === 'applied') return settled.op
    if (settled.kind === 'none') return undefined
  }
  return undefined
}

/**
 * The held operation's outcome has just become unknown: an event that came before the answer may
 * already say what happened. Settles it under the caller's lease and answers as the settled row.
 */
export async function settleHeldFromEvidence(
  db: Database,
  held: Held,
): Promise<InvokeOutcome<never> | undefined> {
  const op = await settleFromEvidence(db, { key: held.op.operationKey, leaseToken: held.leaseToken })
  if (op === undefined) return undefined
  held.op = op
  return settledOutcome(op)
}

/** How an operation settled by an event answers its caller. */
export function settledOutcome(op: OperationRow): InvokeOutcome<never> {
  return op.status === 'completed'
    ? {
        kind: 'completed',
        operationId: op.id,
        result: op.resultJson as never,
        downstreamId: op.downstreamId,
        replayed: false,
      }
    : {
        kind: 'failed',
        operationId: op.id,
        reason: 'rejected',
        error: op.lastError ?? 'reconciled by event',
        details: op.evidence,
      }
}
