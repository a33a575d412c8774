import type { Database } from '../db/client.js'
import { type EvidenceRow, evidenceFor } from '../db/evidence.js'
import { findApproval, listAttempts, listAudit } from '../db/operation-queries.js'
import type { OperationRow } from '../db/operation-rows.js'
import { type AppliedDecision, applyDecision } from '../db/operations.js'
import type { approvals } from '../db/outbound-schema.js'
import { nextStatusOnDecision } from './decision.js'

export type ApprovalRow = typeof approvals.$inferSelect
export type Decision = 'retry' | 'record_success' | 'abandon'
export type ProposedAction = ApprovalRow['proposedAction']

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
  /**
   * Inbound events that named this operation as evidence, with why each did or did not settle it
   * (one received before the claim, or from outside its rule's scope, is a hint, not a verdict).
   */
  namedBy: EvidenceRow[]
  decision: {
    decision: Decision | null
    by: string | null
    at: string | null
    note: string | null
    evidence: unknown
  }
  createdAt: string
}

export async function showApproval(db: Database, id: string): Promise<ApprovalView | undefined> {
  const row = await findApproval(db, id)
  if (row === undefined) return undefined
  const { approval, op } = row
  const attempts = await listAttempts(db, op.id)
  const history = await listAudit(db, op.id)
  const namedBy = await evidenceFor(db.$client, op.operationKey)
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
    namedBy,
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

export interface DecisionRequest extends AppliedDecision {
  approvalId: string
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
  if (request.decision === 'record_success' && isEmptyEvidence(request.evidence)) {
    return { kind: 'invalid', message: 'record_success needs the evidence that the effect happened' }
  }
  if (request.decision === 'retry' && request.payloadHash === undefined) {
    return { kind: 'invalid', message: 'retry needs the payload hash of the arguments it approves' }
  }
  const applied = await applyDecision(db, request.approvalId, request, (action) =>
    nextStatusOnDecision(action, request.decision),
  )
  return applied.kind === 'applied'
    ? {
        kind: 'decided',
        approvalId: request.approvalId,
        operationKey: applied.operationKey,
        status: applied.status,
      }
    : applied
}

/** No evidence at all: absent, null, blank, or an empty object or list (`{}` shows nothing happened). */
function isEmptyEvidence(evidence: unknown): boolean {
  if (evidence === undefined || evidence === null) return true
  if (typeof evidence === 'string') return evidence.trim() === ''
  if (Array.isArray(evidence)) return evidence.length === 0
  return typeof evidence === 'object' && Object.keys(evidence).length === 0
}
