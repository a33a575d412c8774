import { assertNever } from '../assert.js'
import type { OutboundSettings } from '../config/outbound.js'
import type { Database } from '../db/client.js'
import { findPendingApprovalId, latestAttempt, reconciliationReason } from '../db/operation-queries.js'
import type { AttemptRow, Held } from '../db/operation-rows.js'
import { type Claim, markExhausted, markUndone, moveToReconciliation } from '../db/operations.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import { decide, type Step } from './decision.js'
import { settledOutcome, settleFromEvidence } from './evidence.js'
import type { InvokeOutcome } from './outcomes.js'
import { retryPolicyFor } from './settings.js'
import type { RetryPolicy, Tool } from './tools.js'

/** Hands an operation id to reconciliation after a delay (a queued job in the service). */
export interface ReconcileScheduler {
  schedule(operationId: string, attempt: number, delayMs: number): Promise<void>
}

export const noReconcileScheduler: ReconcileScheduler = { schedule: async () => {} }

/**
 * What every driver of the state machine shares: the in-process `invoke`, the agents' HTTP
 * protocol, the reconciler and a saga's compensation read the same table with the same policy.
 */
export interface Machine {
  db: Database
  settings: OutboundSettings
  scheduler: ReconcileScheduler
  logger: Logger
  failpoints: Failpoints
  tool(name: string): Tool<never, unknown> | undefined
}

export const DEFAULT_TIMEOUT_MS = 30_000

/** A tool's bounded retry, the same for a tool run in process and one an agent calls over HTTP. */
export function policyOf(machine: Machine, toolName: string): RetryPolicy {
  return retryPolicyFor(machine.settings, toolName, machine.tool(toolName)?.retry)
}

/**
 * An operation's lease for one call of the tool: it outlasts the call (the tool's time limit plus a
 * margin), and never falls below `outbound.leaseMs`. The worker's lease takes a forward's claim with
 * it too (src/delivery/source-handlers.ts).
 */
export function toolLeaseMs(
  settings: Pick<OutboundSettings, 'leaseMs'>,
  tool: Pick<Tool<never, unknown>, 'timeoutMs'>,
): number {
  return Math.max(settings.leaseMs, (tool.timeoutMs ?? DEFAULT_TIMEOUT_MS) + 5_000)
}

/** The decision table's next step for a held operation, from its newest attempt. */
export async function nextStep(
  machine: Machine,
  held: Held,
  approved: boolean,
): Promise<{ step: Step; last: AttemptRow | undefined }> {
  const last = await latestAttempt(machine.db, held.op.id)
  const step = decide({
    effect: held.op.effectClass,
    last: last === undefined ? undefined : { status: last.status, hasUndoRef: last.undoRef !== null },
    roundAttempts: held.op.roundAttempts,
    maxAttempts: policyOf(machine, held.op.tool).attempts,
    approved,
  })
  return { step, last }
}

/** The steps that end a round without a call: each is one transition and an answer. */
export async function settleStep(
  machine: Machine,
  held: Held,
  step: Exclude<Step, { kind: 'execute' } | { kind: 'undo' }>,
  last: AttemptRow | undefined,
): Promise<InvokeOutcome<never>> {
  switch (step.kind) {
    case 'needs_reconciliation':
      return toReconciliation(machine, held, step.reason, step.closeLast === null ? undefined : last)
    case 'exhausted': {
      const op = await markExhausted(machine.db, held, step.closeLast === null ? undefined : last)
      return {
        kind: 'exhausted',
        operationId: op.id,
        attempts: op.roundAttempts,
        error: op.lastError ?? 'unknown outcome',
        details: last?.details ?? null,
      }
    }
    case 'failed': {
      const op = await markUndone(machine.db, held, step.reason)
      return { kind: 'failed', operationId: op.id, reason: 'undone', error: step.reason, details: null }
    }
    default:
      return assertNever(step)
  }
}

/** Moves the operation to reconciliation and schedules the reconciler (the sweep covers a lost job). */
export async function toReconciliation(
  machine: Machine,
  held: Held,
  reason: string,
  closeLast: { attempt: number } | undefined,
): Promise<InvokeOutcome<never>> {
  const { settings, logger } = machine
  const op = await moveToReconciliation(machine.db, held, reason, settings.reconcileDelayMs, closeLast)
  // An event may have come while the call ran: then nothing is left to reconcile.
  const settled = await settleFromEvidence(machine.db, { key: op.operationKey })
  if (settled !== undefined) return settledOutcome(settled)
  await machine.scheduler.schedule(op.id, op.attempts, settings.reconcileDelayMs).catch((error: unknown) => {
    // The row says reconciliation is due; the reconciler's sweep enqueues it once the queue answers.
    logger.warn({ err: error, operationId: op.id }, 'could not schedule reconciliation; the sweep will')
  })
  return { kind: 'needs_reconciliation', operationId: op.id, reason }
}

/** The guard's answer for an operation the caller could not lease. */
export async function answerFor<R>(
  db: Database,
  claim: Exclude<Claim, { kind: 'claimed' }>,
): Promise<InvokeOutcome<R>> {
  const { op } = claim
  switch (claim.kind) {
    case 'completed':
      return {
        kind: 'completed',
        operationId: op.id,
        result: op.resultJson as R,
        downstreamId: op.downstreamId,
        replayed: true,
      }
    case 'retry_later':
      return {
        kind: 'retry_later',
        operationId: op.id,
        retryAfterMs: Math.max(0, claim.leaseUntil.getTime() - Date.now()),
      }
    case 'payload_conflict':
      return {
        kind: 'payload_conflict',
        operationId: op.id,
        message: `operation key '${op.operationKey}' was used with other arguments (or another tool); the original is kept`,
      }
    case 'needs_reconciliation':
      // Always the code the move recorded (as on the first answer), never the caller's error text.
      return {
        kind: 'needs_reconciliation',
        operationId: op.id,
        reason: (await reconciliationReason(db, op.id)) ?? 'unknown_outcome',
      }
    case 'awaiting_approval':
      return {
        kind: 'awaiting_approval',
        operationId: op.id,
        approvalId: await findPendingApprovalId(db, op.id),
      }
    case 'failed':
    case 'compensated': {
      const last = await latestAttempt(db, op.id)
      const reason =
        claim.kind === 'compensated' ? 'compensated' : last?.status === 'compensated' ? 'undone' : 'rejected'
      return {
        kind: 'failed',
        operationId: op.id,
        reason,
        error: op.lastError ?? claim.kind,
        details: last?.details ?? null,
      }
    }
    case 'abandoned':
      return { kind: 'abandoned', operationId: op.id }
    default:
      return assertNever(claim)
  }
}
