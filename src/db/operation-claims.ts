import { randomUUID } from 'node:crypto'
import type postgres from 'postgres'
import type { Database } from './client.js'
import { LeaseLostError } from './lease.js'
import { insertAudit } from './operation-audit.js'
import {
  type EffectClass,
  type Held,
  json,
  type OperationRow,
  type OperationStatus,
  toOperation,
} from './operation-rows.js'

type Sql = postgres.Sql

export interface ClaimRequest {
  key: string
  tool: string
  effect: EffectClass
  payloadHash: string
  args: unknown
  leaseMs: number
  actor: string
  runId?: string | undefined
  traceId?: string | undefined
  toolCallId?: string | undefined
}

export type Claim =
  /** This caller holds the lease. `approved`: taken on a human's retry decision. */
  | { kind: 'claimed'; op: OperationRow; leaseToken: string; approved: boolean; takeover: boolean }
  | { kind: 'completed'; op: OperationRow }
  | { kind: 'retry_later'; op: OperationRow; leaseUntil: Date }
  | { kind: 'payload_conflict'; op: OperationRow }
  | { kind: 'needs_reconciliation'; op: OperationRow }
  | { kind: 'awaiting_approval'; op: OperationRow }
  | { kind: 'failed'; op: OperationRow }
  | { kind: 'compensated'; op: OperationRow }
  | { kind: 'abandoned'; op: OperationRow }

/**
 * The claim: one INSERT … ON CONFLICT on the unique operation key. A new key is inserted with a
 * lease and audited in the same statement; an existing one is taken over only if it has the same
 * arguments, tool and effect class and is claimable (an expired lease, an approved retry, an
 * exhausted idempotent round). Concurrent callers serialise on the index, so exactly one of them
 * gets the lease; nothing checks first and writes later. When nothing was claimed, the same
 * statement answers with the row as it stands.
 */
export async function claimOperation(db: Database, request: ClaimRequest): Promise<Claim> {
  const client = db.$client
  const observed = { runId: request.runId, traceId: request.traceId, toolCallId: request.toolCallId }
  for (let round = 0; round < 3; round += 1) {
    const token = randomUUID()
    const [row] = await client`
      with claimed as (
        insert into operations (operation_key, tool, effect_class, payload_hash, args, status,
          lease_token, lease_until, run_id, trace_id, tool_call_id)
        values (${request.key}, ${request.tool}, ${request.effect}, ${request.payloadHash},
          ${json(request.args) ?? 'null'}::text::jsonb, 'in_progress', ${token},
          now() + ${request.leaseMs} * interval '1 millisecond',
          ${request.runId ?? null}, ${request.traceId ?? null}, ${request.toolCallId ?? null})
        on conflict (operation_key) do update set
          lease_token = excluded.lease_token, lease_until = excluded.lease_until,
          -- A new round after an approval or an exhausted round: the cap counts afresh.
          round_attempts = case when operations.status = 'in_progress' then operations.round_attempts else 0 end,
          run_id = coalesce(excluded.run_id, operations.run_id),
          trace_id = coalesce(excluded.trace_id, operations.trace_id),
          tool_call_id = coalesce(excluded.tool_call_id, operations.tool_call_id),
          updated_at = now()
        where operations.payload_hash = excluded.payload_hash and operations.tool = excluded.tool
          and operations.effect_class = excluded.effect_class
          and operations.status in ('in_progress', 'retry_approved', 'exhausted')
          and (operations.lease_until is null or operations.lease_until < now())
        returning *, (xmax = 0) as inserted
      ), audit as (
        ${insertAudit(
          client,
          client`select id, operation_key, 'claimed', null, 'in_progress', ${request.actor}, ${json(observed)}::text::jsonb
          from claimed where inserted`,
        )}
      )
      select c.*, true as claimed from claimed c
      union all
      select o.*, false, false from operations o
      where o.operation_key = ${request.key} and not exists (select 1 from claimed)`
    // Deleted between the two (retention), or its lease ran out meanwhile: claim again.
    if (row === undefined) continue
    const op = toOperation(row)
    if (row.claimed === true) {
      const held: Held = { op, leaseToken: token, actor: request.actor }
      if (row.inserted !== true) await takeOver(client, held, observed)
      return {
        kind: 'claimed',
        op: held.op,
        leaseToken: token,
        approved: op.status === 'retry_approved',
        takeover: row.inserted !== true && op.status === 'in_progress',
      }
    }
    if (
      op.payloadHash !== request.payloadHash ||
      op.tool !== request.tool ||
      op.effectClass !== request.effect
    ) {
      return { kind: 'payload_conflict', op }
    }
    switch (op.status) {
      case 'completed':
      case 'needs_reconciliation':
      case 'awaiting_approval':
      case 'failed':
      case 'compensated':
      case 'abandoned':
        return { kind: op.status, op }
      case 'in_progress':
      case 'retry_approved':
      case 'exhausted':
        if (op.leaseUntil !== null) return { kind: 'retry_later', op, leaseUntil: op.leaseUntil }
        continue
    }
  }
  throw new Error(`operation '${request.key}' kept changing while it was claimed`)
}

/**
 * The second half of taking an existing operation over: its status becomes in_progress and the
 * audit says from what. It is guarded by the new lease; a crash before it leaves the row with its
 * old status under a lease that runs out, which the next claim reads exactly as this one did.
 */
async function takeOver(client: Sql, held: Held, observed: unknown) {
  const previous = held.op.status
  const event = previous === 'in_progress' ? 'lease_taken_over' : 'claimed_again'
  const [row] = await client`
    with op as (
      update operations set status = 'in_progress' where id = ${held.op.id} and lease_token = ${held.leaseToken}
      returning *
    ), audit as (
      ${insertAudit(
        client,
        client`select id, operation_key, ${event}, ${previous}, 'in_progress', ${held.actor}, ${json(observed)}::text::jsonb
        from op`,
      )}
    )
    select * from op`
  if (row === undefined) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = toOperation(row)
}

export interface Question {
  action: 'execute' | 'undo'
  reason: string
  evidence: unknown
  proposedAction: 'retry' | 'record_success' | 'abandon' | 'investigate'
}

/**
 * Hands an operation to a human: the pending approval, its evidence and the proposed action commit
 * with the status change (guarded by the lease), so no operation is left waiting without a question.
 */
export async function escalate(db: Database, held: Held, question: Question) {
  const client = db.$client
  const evidence = json(question.evidence)
  const [row] = await client`
    with op as (
      update operations set status = 'awaiting_approval', evidence = ${evidence}::text::jsonb,
        lease_token = null, lease_until = null, reconcile_at = null, updated_at = now()
      where id = ${held.op.id} and lease_token = ${held.leaseToken}
      returning *
    ), created as (
      insert into approvals (operation_id, action, payload_hash, reason, evidence, proposed_action)
      select id, ${question.action}, payload_hash, ${question.reason}, ${evidence}::text::jsonb, ${question.proposedAction}
      from op
      on conflict do nothing
      returning id
    ), approval as (
      select coalesce((select id from created),
        (select id from approvals where operation_id = ${held.op.id} and status = 'pending')) as id
    ), audit as (
      ${insertAudit(
        client,
        client`select op.id, op.operation_key, 'escalated', ${held.op.status}, 'awaiting_approval', ${held.actor},
          jsonb_build_object('approvalId', approval.id, 'action', ${question.action}::text,
            'reason', ${question.reason}::text, 'proposedAction', ${question.proposedAction}::text)
        from op, approval`,
      )}
    )
    select op.*, (select id from approval) as approval_id from op`
  if (row === undefined) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = toOperation(row)
  return { op: held.op, approvalId: text(row.approval_id) }
}

const text = (value: unknown) => (value === null || value === undefined ? '' : String(value))

/** A human's decision on an approval. */
export interface AppliedDecision {
  decision: 'retry' | 'record_success' | 'abandon'
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

export type ApplyOutcome =
  | { kind: 'applied'; operationKey: string; status: OperationStatus }
  | { kind: 'not_found' }
  | { kind: 'already_decided'; decision: AppliedDecision['decision'] | null; by: string | null }
  | { kind: 'payload_mismatch'; expected: string }

/**
 * A human's decision, in one transaction: the approval is locked with its operation, checked, then
 * the operation's new status, the decided approval and the audit row commit in one statement.
 * `next` maps the question's action and the decision to the operation's status.
 */
export async function applyDecision(
  db: Database,
  approvalId: string,
  request: AppliedDecision,
  next: (action: 'execute' | 'undo') => OperationStatus,
): Promise<ApplyOutcome> {
  return db.$client.begin(async (tx) => {
    const [row] = await tx`
      select a.status as approval_status, a.decision, a.decided_by, a.payload_hash as approved_hash,
        a.action, o.id, o.operation_key, o.status, o.payload_hash
      from approvals a join operations o on o.id = a.operation_id
      where a.id = ${approvalId}
      for update`
    if (row === undefined) return { kind: 'not_found' } as const
    if (row.approval_status !== 'pending' || row.status !== 'awaiting_approval') {
      return { kind: 'already_decided', decision: row.decision ?? null, by: row.decided_by ?? null } as const
    }
    const approvedHash = String(row.approved_hash)
    if (
      request.decision === 'retry' &&
      (request.payloadHash !== approvedHash || row.payload_hash !== approvedHash)
    ) {
      return { kind: 'payload_mismatch', expected: approvedHash } as const
    }
    const action = row.action as 'execute' | 'undo'
    const status = next(action)
    const recordsSuccess = request.decision === 'record_success' && action === 'execute'
    await tx`
      with op as (
        update operations set status = ${status}, lease_token = null, lease_until = null, updated_at = now(),
          evidence = case when ${recordsSuccess} then ${json(request.evidence)}::text::jsonb else evidence end,
          result_json = case when ${recordsSuccess} then ${json(request.result)}::text::jsonb else result_json end,
          downstream_id = case when ${recordsSuccess} then coalesce(${request.downstreamId ?? null}, downstream_id)
            else downstream_id end,
          completed_at = case when ${recordsSuccess} then now() else completed_at end
        where id = ${String(row.id)}
        returning id, operation_key
      ), decided as (
        update approvals set status = 'decided', decision = ${request.decision}, decided_by = ${request.by},
          decided_at = now(), decision_evidence = ${json(request.evidence)}::text::jsonb, note = ${request.note ?? null}
        where id = ${approvalId}
      )
      ${insertAudit(
        tx,
        tx`select id, operation_key, ${`decided_${request.decision}`}, ${String(row.status)}, ${status},
          ${`human:${request.by}`},
          ${json({ approvalId, action, note: request.note, payloadHash: request.payloadHash })}::text::jsonb
        from op`,
      )}`
    return { kind: 'applied', operationKey: String(row.operation_key), status } as const
  }) as Promise<ApplyOutcome>
}
