import { and, desc, eq, isNull, lt, or, sql } from 'drizzle-orm'
import type { Database } from '../db/client.js'
import { approvals, operations } from '../db/outbound-schema.js'
import { audit, type Held, LeaseLostError, listAttempts, listAudit, type OperationRow } from './store.js'

export type ApprovalRow = typeof approvals.$inferSelect
export type Decision = 'retry' | 'record_success' | 'abandon'
export type ProposedAction = ApprovalRow['proposedAction']

/**
 * Hands an operation to a human: the pending approval, its evidence and the proposed action commit
 * with the status change (guarded by the lease), so no operation is left waiting without a question.
 */
export async function escalate(
  db: Database,
  held: Held,
  question: { action: 'execute' | 'undo'; reason: string; evidence: unknown; proposedAction: ProposedAction },
): Promise<{ op: OperationRow; approvalId: string }> {
  return db.transaction(async (tx) => {
    const [op] = await tx
      .update(operations)
      .set({
        status: 'awaiting_approval',
        evidence: question.evidence ?? null,
        leaseToken: null,
        leaseUntil: null,
        reconcileAt: null,
        updatedAt: sql`now()`,
      })
      .where(and(eq(operations.id, held.op.id), eq(operations.leaseToken, held.leaseToken)))
      .returning()
    if (op === undefined) throw new LeaseLostError(held.op.operationKey)
    const [created] = await tx
      .insert(approvals)
      .values({
        operationId: op.id,
        action: question.action,
        payloadHash: op.payloadHash,
        reason: question.reason,
        evidence: question.evidence ?? null,
        proposedAction: question.proposedAction,
      })
      .onConflictDoNothing()
      .returning({ id: approvals.id })
    const approvalId = created?.id ?? (await pendingApprovalId(tx, op.id)) ?? ''
    await audit(tx, op, {
      event: 'escalated',
      from: held.op.status,
      to: 'awaiting_approval',
      actor: held.actor,
      details: {
        approvalId,
        action: question.action,
        reason: question.reason,
        proposedAction: question.proposedAction,
      },
    })
    held.op = op
    return { op, approvalId }
  })
}

async function pendingApprovalId(
  db: Pick<Database, 'select'>,
  operationId: string,
): Promise<string | undefined> {
  const [row] = await db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(eq(approvals.operationId, operationId), eq(approvals.status, 'pending')))
  return row?.id
}

export async function findPendingApprovalId(db: Database, operationId: string): Promise<string | null> {
  return (await pendingApprovalId(db, operationId)) ?? null
}

/** Everything the approver must see before deciding (the source document's concrete gate). */
export interface ApprovalView {
  id: string
  status: ApprovalRow['status']
  action: ApprovalRow['action']
  reason: string
  proposedAction: ProposedAction
  payloadHash: string
  evidence: unknown
  operation: {
    id: string
    key: string
    tool: string
    effect: OperationRow['effectClass']
    status: OperationRow['status']
    args: unknown
    downstreamId: string | null
    undoRef: unknown
    lastError: string | null
  }
  attempts: Array<{
    attempt: number
    attemptKey: string
    status: string
    error: string | null
    startedAt: string
  }>
  history: Array<{ at: string; event: string; from: string | null; to: string | null; actor: string }>
  decision: {
    decision: Decision | null
    by: string | null
    at: string | null
    note: string | null
    evidence: unknown
  }
  createdAt: string
}

export async function listApprovals(
  db: Database,
  filter: { status?: 'pending' | 'decided' | undefined; limit?: number | undefined } = {},
) {
  return db
    .select({
      id: approvals.id,
      status: approvals.status,
      action: approvals.action,
      reason: approvals.reason,
      proposedAction: approvals.proposedAction,
      decision: approvals.decision,
      createdAt: approvals.createdAt,
      operationKey: operations.operationKey,
      tool: operations.tool,
      effect: operations.effectClass,
    })
    .from(approvals)
    .innerJoin(operations, eq(operations.id, approvals.operationId))
    .where(filter.status === undefined ? undefined : eq(approvals.status, filter.status))
    .orderBy(desc(approvals.createdAt))
    .limit(filter.limit ?? 100)
}

export async function showApproval(db: Database, id: string): Promise<ApprovalView | undefined> {
  const [row] = await db
    .select({ approval: approvals, op: operations })
    .from(approvals)
    .innerJoin(operations, eq(operations.id, approvals.operationId))
    .where(eq(approvals.id, id))
  if (row === undefined) return undefined
  const { approval, op } = row
  const attempts = await listAttempts(db, op.id)
  const history = await listAudit(db, op.id)
  return {
    id: approval.id,
    status: approval.status,
    action: approval.action,
    reason: approval.reason,
    proposedAction: approval.proposedAction,
    payloadHash: approval.payloadHash,
    evidence: approval.evidence,
    operation: {
      id: op.id,
      key: op.operationKey,
      tool: op.tool,
      effect: op.effectClass,
      status: op.status,
      args: op.args,
      downstreamId: op.downstreamId,
      undoRef: op.undoRef,
      lastError: op.lastError,
    },
    attempts: attempts.map((a) => ({
      attempt: a.attempt,
      attemptKey: a.attemptKey,
      status: a.status,
      error: a.error,
      startedAt: a.startedAt.toISOString(),
    })),
    history: history.map((h) => ({
      at: h.at.toISOString(),
      event: h.event,
      from: h.fromStatus,
      to: h.toStatus,
      actor: h.actor,
    })),
    decision: {
      decision: approval.decision,
      by: approval.decidedBy,
      at: approval.decidedAt?.toISOString() ?? null,
      note: approval.note,
      evidence: approval.decisionEvidence,
    },
    createdAt: approval.createdAt.toISOString(),
  }
}

export interface DecisionRequest {
  approvalId: string
  decision: Decision
  /** Who decides; recorded in the approval and the audit. */
  by: string
  /** For `retry`: the payload hash the approver saw. A retry is bound to exactly those arguments. */
  payloadHash?: string | undefined
  /** For `record_success`: what shows the effect happened (required). */
  evidence?: unknown
  result?: unknown
  downstreamId?: string | undefined
  note?: string | undefined
}

export type DecideOutcome =
  | { kind: 'decided'; approvalId: string; operationKey: string; status: OperationRow['status'] }
  | { kind: 'not_found' }
  | { kind: 'already_decided'; decision: Decision | null; by: string | null }
  | { kind: 'payload_mismatch'; expected: string }
  | { kind: 'invalid'; message: string }

/**
 * Applies a human's decision. `retry` lets exactly one more round run for these arguments (the next
 * claim with the same payload hash takes it); `record_success` records the evidence and runs
 * nothing; `abandon` stops the operation for good. On an undo question, `retry` lets the undo run
 * again and `abandon` leaves the effect in place.
 */
export async function decide(db: Database, request: DecisionRequest): Promise<DecideOutcome> {
  if (request.by.trim() === '') return { kind: 'invalid', message: 'the decider (by) is required' }
  if (
    request.decision === 'record_success' &&
    (request.evidence === undefined || request.evidence === null)
  ) {
    return { kind: 'invalid', message: 'record_success needs the evidence that the effect happened' }
  }
  if (request.decision === 'retry' && request.payloadHash === undefined) {
    return { kind: 'invalid', message: 'retry needs the payload hash of the arguments it approves' }
  }
  return db.transaction(async (tx) => {
    const [row] = await tx
      .select({ approval: approvals, op: operations })
      .from(approvals)
      .innerJoin(operations, eq(operations.id, approvals.operationId))
      .where(eq(approvals.id, request.approvalId))
      .for('update')
    if (row === undefined) return { kind: 'not_found' } as const
    const { approval, op } = row
    if (approval.status !== 'pending' || op.status !== 'awaiting_approval') {
      return { kind: 'already_decided', decision: approval.decision, by: approval.decidedBy } as const
    }
    if (
      request.decision === 'retry' &&
      (request.payloadHash !== approval.payloadHash || op.payloadHash !== approval.payloadHash)
    ) {
      return { kind: 'payload_mismatch', expected: approval.payloadHash } as const
    }
    const undo = approval.action === 'undo'
    const next: OperationRow['status'] =
      request.decision === 'retry'
        ? undo
          ? 'completed'
          : 'retry_approved'
        : request.decision === 'record_success'
          ? undo
            ? 'compensated'
            : 'completed'
          : undo
            ? 'completed'
            : 'abandoned'
    const recordsSuccess = request.decision === 'record_success' && !undo
    await tx
      .update(operations)
      .set({
        status: next,
        leaseToken: null,
        leaseUntil: null,
        updatedAt: sql`now()`,
        ...(recordsSuccess
          ? {
              evidence: request.evidence,
              resultJson: request.result ?? null,
              downstreamId: request.downstreamId ?? op.downstreamId,
              completedAt: sql`now()`,
            }
          : {}),
      })
      .where(eq(operations.id, op.id))
    await tx
      .update(approvals)
      .set({
        status: 'decided',
        decision: request.decision,
        decidedBy: request.by,
        decidedAt: sql`now()`,
        decisionEvidence: request.evidence ?? null,
        note: request.note ?? null,
      })
      .where(eq(approvals.id, approval.id))
    await audit(tx, op, {
      event: `decided_${request.decision}`,
      from: op.status,
      to: next,
      actor: `human:${request.by}`,
      details: {
        approvalId: approval.id,
        action: approval.action,
        note: request.note,
        payloadHash: request.payloadHash,
      },
    })
    return { kind: 'decided', approvalId: approval.id, operationKey: op.operationKey, status: next } as const
  })
}

/** Operations by status, newest first (the admin API's list). */
export async function listOperations(
  db: Database,
  filter: { status?: OperationRow['status'] | undefined; limit?: number | undefined } = {},
) {
  return db
    .select({
      id: operations.id,
      key: operations.operationKey,
      tool: operations.tool,
      effect: operations.effectClass,
      status: operations.status,
      attempts: operations.attempts,
      lastError: operations.lastError,
      updatedAt: operations.updatedAt,
    })
    .from(operations)
    .where(filter.status === undefined ? undefined : eq(operations.status, filter.status))
    .orderBy(desc(operations.updatedAt))
    .limit(filter.limit ?? 100)
}

/** Rows due for reconciliation whose job may be lost, with no live reconciler on them. */
export async function dueForReconciliation(db: Database, limit: number) {
  return db
    .select({ id: operations.id, attempts: operations.attempts })
    .from(operations)
    .where(
      and(
        eq(operations.status, 'needs_reconciliation'),
        lt(operations.reconcileAt, sql`now()`),
        or(isNull(operations.leaseUntil), lt(operations.leaseUntil, sql`now()`)),
      ),
    )
    .limit(limit)
}
