import type postgres from 'postgres'
import type { Database } from './client.js'
import { LeaseLostError } from './lease.js'
import { insertAudit } from './operation-audit.js'
import { operationBatches } from './operation-batches.js'
import {
  type AttemptStatus,
  attemptKey,
  type Held,
  json,
  type OperationRow,
  type OperationStatus,
  toOperation,
} from './operation-rows.js'

export type { Held }

/**
 * The outbound state machine: every transition of an operation, each a named function of one
 * statement (or, for a human's decision, one transaction) that also writes its audit row. The
 * in-process ledger, the agents' HTTP protocol, the reconciler and the approvals change operations
 * only through these. Every change of a leased operation is guarded by its lease token: a caller
 * whose lease was taken over gets LeaseLostError and the new holder decides.
 *
 * Raw SQL, not drizzle's builder: these run several times per operation on the forward path, where
 * the builder cost more than the statements (see src/db/claims.ts).
 */

type Sql = postgres.Sql
type Fragment = postgres.PendingQuery<postgres.Row[]>

interface AttemptChange {
  attempt: number
  status: AttemptStatus
  /** Left as it is when undefined. */
  error?: string | null
  details?: unknown
}

/**
 * The one statement behind every transition of a leased operation: the row change, the attempt
 * change and the audit row commit together or not at all.
 */
async function change(
  client: Sql,
  held: Held,
  step: {
    set: ((sql: Sql) => Fragment) | undefined
    event: string
    details?: unknown
    attempt?: AttemptChange
  },
): Promise<OperationRow> {
  const attempt = step.attempt
  const set =
    step.set === undefined ? client`updated_at = now()` : client`${step.set(client)}, updated_at = now()`
  const [row] = await client`
    with op as (
      update operations set ${set}
      where id = ${held.op.id} and lease_token = ${held.leaseToken}
      returning *
    ), attempt_change as (
      update operation_attempts set
        status = ${attempt?.status ?? 'unknown'},
        error = case when ${attempt?.error !== undefined} then ${attempt?.error ?? null} else error end,
        details = case when ${attempt?.details !== undefined}
          then ${json(attempt?.details)}::text::jsonb else details end,
        finished_at = now()
      where ${attempt !== undefined} and operation_id = (select id from op) and attempt = ${attempt?.attempt ?? 0}
    ), audit as (
      ${insertAudit(
        client,
        client`select id, operation_key, ${step.event}, ${held.op.status}, status::text, ${held.actor},
          ${json(step.details)}::text::jsonb
        from op`,
      )}
    )
    select * from op`
  if (row === undefined) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = toOperation(row)
  return held.op
}

const lease = (client: Sql, ms: number) => client`now() + ${ms} * interval '1 millisecond'`

/**
 * Starts one attempt: the in-flight row, the undo reference (compensable) and a fresh lease commit
 * together, before anything is sent. A crash after this commit leaves the attempt in flight, which
 * the decision table reads as "may have landed". `closeLast` first settles an attempt a crashed
 * caller left in flight.
 */
export async function startAttempt(
  db: Database,
  held: Held,
  options: {
    leaseMs: number
    closeLast: 'unknown' | 'not_sent' | null
    undoRefFor?: ((attemptKey: string) => unknown) | undefined
  },
): Promise<{ attempt: number; attemptKey: string; leaseUntil: Date }> {
  const client = db.$client
  // The lease guard makes the next number safe to compute here: nobody else starts attempts.
  const attempt = held.op.attempts + 1
  const key = attemptKey(held.op.operationKey, attempt, held.op.effectClass === 'compensable')
  const undoRef = json(options.undoRefFor?.(key) ?? null)
  const [row] = await client`
    with op as (
      update operations set attempts = attempts + 1, round_attempts = round_attempts + 1,
        lease_until = ${lease(client, options.leaseMs)}, undo_ref = coalesce(${undoRef}::text::jsonb, undo_ref),
        updated_at = now()
      where id = ${held.op.id} and lease_token = ${held.leaseToken} and attempts = ${attempt - 1}
      returning *
    ), closed as (
      update operation_attempts set status = ${options.closeLast ?? 'unknown'}, finished_at = now()
      where ${options.closeLast !== null} and operation_id = (select id from op) and status = 'in_flight'
    ), started as (
      insert into operation_attempts (operation_id, attempt, attempt_key, undo_ref)
      select id, ${attempt}, ${key}, ${undoRef}::text::jsonb from op
    ), audit as (
      ${insertAudit(
        client,
        client`select id, operation_key, 'attempt_started', ${held.op.status}, status::text, ${held.actor},
          ${json({ attempt, attemptKey: key, undoRef: options.undoRefFor?.(key) ?? null })}::text::jsonb
        from op`,
      )}
    )
    select * from op`
  if (row === undefined) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = toOperation(row)
  return { attempt, attemptKey: key, leaseUntil: held.op.leaseUntil ?? new Date() }
}

/**
 * Records the undo reference of the attempt in flight (agents over HTTP do this before their call).
 * Nothing changes unless the lease is held and the attempt is still in flight.
 */
export async function recordUndoRef(db: Database, held: Held, attempt: number, undoRef: unknown) {
  const client = db.$client
  const ref = json(undoRef)
  const [row] = await client`
    with target as (
      select a.operation_id, a.attempt from operation_attempts a join operations o on o.id = a.operation_id
      where o.id = ${held.op.id} and o.lease_token = ${held.leaseToken}
        and a.attempt = ${attempt} and a.status = 'in_flight'
    ), attempt_change as (
      update operation_attempts a set undo_ref = ${ref}::text::jsonb
      from target t where a.operation_id = t.operation_id and a.attempt = t.attempt
    ), op as (
      update operations set undo_ref = ${ref}::text::jsonb, updated_at = now()
      where id = ${held.op.id} and exists (select 1 from target)
      returning *
    ), audit as (
      ${insertAudit(
        client,
        client`select id, operation_key, 'undo_ref_recorded', status::text, status::text, ${held.actor},
          ${json({ attempt, undoRef })}::text::jsonb
        from op`,
      )}
    )
    select * from op`
  if (row === undefined) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = toOperation(row)
}

/**
 * The effect happened: completed with its result, the attempt succeeded. Written in one statement
 * with every other success and DONE mark of the same moment (operation-batches.ts).
 */
export async function recordSuccess(
  db: Database,
  held: Held,
  attempt: number,
  outcome: { result?: unknown; downstreamId?: string | undefined },
): Promise<OperationRow> {
  const downstreamId = outcome.downstreamId ?? null
  const settled = await operationBatches(db.$genericPlans).settle.run({
    completion: {
      operationId: held.op.id,
      leaseToken: held.leaseToken,
      attempt,
      resultJson: json(outcome.result ?? null),
      downstreamId,
      actor: held.actor,
    },
  })
  if (!settled.completed) throw new LeaseLostError(`operation '${held.op.operationKey}'`)
  held.op = {
    ...held.op,
    status: 'completed',
    resultJson: outcome.result ?? null,
    downstreamId,
    lastError: null,
    leaseToken: null,
    leaseUntil: null,
  }
  return held.op
}

/** A definite rejection: it did not happen, and the operation fails. */
export const recordRejection = (
  db: Database,
  held: Held,
  attempt: number,
  error: string,
  details?: unknown,
) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'failed', last_error = ${error}, lease_token = null, lease_until = null`,
    event: 'rejected',
    details: { attempt },
    attempt: { attempt, status: 'rejected', error, details: details ?? null },
  })

/** No answer that settles it: the decision table says what follows (never "failed"). */
export const recordUnknown = (db: Database, held: Held, attempt: number, error: string, details?: unknown) =>
  change(db.$client, held, {
    set: (sql) => sql`last_error = ${error}`,
    event: 'outcome_unknown',
    details: { attempt, error },
    attempt: { attempt, status: 'unknown', error, details: details ?? null },
  })

/** The undo of `last` is about to run (in process, or handed to an agent) under a renewed lease. */
export const startUndo = (
  db: Database,
  held: Held,
  last: { attempt: number; attemptKey: string },
  leaseMs: number,
  closeLast: boolean,
) =>
  change(db.$client, held, {
    set: (sql) => sql`lease_until = ${lease(sql, leaseMs)}`,
    event: 'undo_started',
    details: { attempt: last.attempt, attemptKey: last.attemptKey },
    ...(closeLast ? { attempt: { attempt: last.attempt, status: 'unknown' as const } } : {}),
  })

/** The undo ran and committed: only now may the next attempt go out, under a new key. */
export const recordUndoSuccess = (db: Database, held: Held, attempt: number, details?: unknown) =>
  change(db.$client, held, {
    set: undefined,
    event: 'compensated',
    details: { attempt },
    attempt: { attempt, status: 'compensated', details: details ?? null },
  })

export const recordUndoFailure = (
  db: Database,
  held: Held,
  attempt: number,
  error: string,
  details?: unknown,
) =>
  change(db.$client, held, {
    set: (sql) => sql`last_error = ${`undo failed: ${error}`}`,
    event: 'undo_failed',
    details: { attempt, error },
    attempt: { attempt, status: 'undo_failed', error, details: details ?? null },
  })

/** An idempotent round used up; `closeLast` closes the attempt left in flight as unknown. */
export const markExhausted = (db: Database, held: Held, closeLast: { attempt: number } | undefined) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'exhausted', lease_token = null, lease_until = null`,
    event: 'retries_exhausted',
    details: { roundAttempts: held.op.roundAttempts },
    ...(closeLast === undefined
      ? {}
      : { attempt: { attempt: closeLast.attempt, status: 'unknown' as const } }),
  })

/** Every attempt was undone and the cap is reached: it definitely did not happen. */
export const markUndone = (db: Database, held: Held, reason: string) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'failed', last_error = ${reason}, lease_token = null, lease_until = null`,
    event: 'failed',
    details: { reason },
  })

/** Unknown whether it happened: reconciliation is due after `delayMs` (never "failed"). */
export const moveToReconciliation = (
  db: Database,
  held: Held,
  reason: string,
  delayMs: number,
  closeLast: { attempt: number } | undefined,
) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'needs_reconciliation', lease_token = null, lease_until = null,
      reconcile_at = ${lease(sql, delayMs)}`,
    event: 'needs_reconciliation',
    details: { reason },
    ...(closeLast === undefined
      ? {}
      : { attempt: { attempt: closeLast.attempt, status: 'unknown' as const } }),
  })

/**
 * Hands an agent's operation back: the lease goes to nobody (a token no caller has) and runs out
 * after `delayMs`, so the next claim cannot come sooner than the backoff allows.
 */
export const releaseFor = (db: Database, held: Held, delayMs: number, unheldToken: string) =>
  change(db.$client, held, {
    set: (sql) => sql`lease_token = ${unheldToken}, lease_until = ${lease(sql, delayMs)}`,
    event: 'released',
    details: { retryAfterMs: delayMs },
  })

/** Reconciliation found the effect: success with its evidence, and nothing runs. */
export const recordReconciledFound = (
  db: Database,
  held: Held,
  found: { result?: unknown; downstreamId?: string | undefined; evidence?: unknown },
) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'completed', result_json = ${json(found.result)}::text::jsonb,
      downstream_id = coalesce(${found.downstreamId ?? null}, downstream_id),
      evidence = ${json(found.evidence)}::text::jsonb, lease_token = null, lease_until = null,
      reconcile_at = null, completed_at = now()`,
    event: 'reconciled_found',
    details: { evidence: found.evidence ?? null },
  })

/**
 * How much earlier than an operation's first claim its evidence's event may have been received and
 * still count. Both times are PostgreSQL's clock (each row's `now()`), so this absorbs only the
 * start times of the two transactions, not clock skew between hosts.
 */
export const EVIDENCE_CLOCK_MARGIN_MS = 1000

export type EvidenceSettlement =
  /** The event settled the operation: completed, or failed for a failure event. */
  | { kind: 'applied'; op: OperationRow; event: string }
  /** The operation had settled otherwise first; that evidence is closed and the next may apply. */
  | { kind: 'superseded' }
  /** That evidence may not settle the operation (scope, internal, too old): closed as a hint; the next may apply. */
  | { kind: 'not_applicable' }
  /** No pending evidence for the key, or the operation's outcome is not unknown (yet). */
  | { kind: 'none' }

/**
 * An inbound event settles an operation whose outcome is unknown: completed with the event as its
 * evidence (or failed, for a failure event), the attempt in question closed, a pending approval
 * decided by the event, the evidence marked applied and the audit row written, in one statement.
 * Unknown means: needs_reconciliation or awaiting_approval (nothing runs them), or, with no live
 * lease, retry_approved, exhausted, or in_progress with its newest attempt unknown or in flight (a
 * crashed caller). `leaseToken`: the caller holds the lease and has just recorded the unknown outcome.
 * Evidence for an operation that is still being called stays pending until one of those holds.
 *
 * Evidence settles only what it may: an operation within its rule's `settles` scope (tools, key
 * prefixes), never an internal one (forwards, alerts), and only if its event was received after the
 * operation was first claimed (less EVIDENCE_CLOCK_MARGIN): an event from before cannot be about any
 * attempt of it. Evidence that may not settle its operation is closed `not_applicable` with a note,
 * which the operation's page and its approval show to the person deciding it.
 */
export async function settleByEvidence(
  db: Database,
  target: { key: string; leaseToken?: string | undefined },
): Promise<EvidenceSettlement> {
  const client = db.$client
  const unknown =
    target.leaseToken !== undefined
      ? client`o.lease_token = ${target.leaseToken}`
      : client`o.status in ('needs_reconciliation', 'awaiting_approval')
          or ((o.lease_until is null or o.lease_until < now()) and (
            o.status in ('retry_approved', 'exhausted')
            or (o.status = 'in_progress' and exists (
              select 1 from operation_attempts a where a.operation_id = o.id and a.attempt = o.attempts
                and a.status in ('in_flight', 'unknown')))))`
  // Whether the evidence (ev) may settle the operation (o); null when it may, else why not.
  const refusal = client`case
      when ev.settles_tools is null and ev.settles_key_prefixes is null
        then 'its rule had no settles scope when it was read'
      when o.tool = 'forward' or o.tool like 'alert.%'
        then 'the operation is internal to the service'
      when not (ev.settles_tools is null or o.tool = any(ev.settles_tools))
        or not (ev.settles_key_prefixes is null
          or exists (select 1 from unnest(ev.settles_key_prefixes) p where starts_with(o.operation_key, p)))
        then 'the operation is outside the scope its rule settles'
      when ev.event_received_at is null
        or ev.event_received_at < o.created_at - ${EVIDENCE_CLOCK_MARGIN_MS} * interval '1 millisecond'
        then 'its event was received before the operation was first claimed'
    end`
  const [row] = await client`
    with ev as (
      -- Two appliers of one key (a worker, an invoke, the sweep) never wait on each other's evidence.
      select *, 'event:' || source || '/' || event_id as actor,
        jsonb_build_object('settledBy', 'event', 'source', source, 'eventId', event_id, 'eventType', event_type,
          'outcome', outcome, 'downstreamId', downstream_id, 'failure', failure) as body
      from operation_evidence where operation_key = ${target.key} and status = 'pending'
      order by id limit 1 for update skip locked
    ), target as (
      select o.id, o.status::text as from_status from operations o, ev
      where o.operation_key = ev.operation_key and (${unknown}) and (${refusal}) is null
      for update of o
    ), op as (
      update operations o set
        status = (case when ev.outcome = 'succeeded' then 'completed' else 'failed' end)::operation_status,
        result_json = case when ev.outcome = 'succeeded' then ev.body else o.result_json end,
        downstream_id = coalesce(ev.downstream_id, o.downstream_id),
        evidence = ev.body,
        last_error = case when ev.outcome = 'succeeded' then null
          else 'reconciled by event ' || ev.source || '/' || ev.event_id || ': ' || coalesce(ev.failure, 'failed') end,
        lease_token = null, lease_until = null, reconcile_at = null,
        completed_at = case when ev.outcome = 'succeeded' then now() else o.completed_at end,
        updated_at = now()
      from target, ev
      where o.id = target.id
      returning o.*, target.from_status
    ), attempt_change as (
      update operation_attempts a set
        status = (case when op.status = 'completed' then 'succeeded' else 'rejected' end)::attempt_status,
        error = case when op.status = 'completed' then a.error else op.last_error end, finished_at = now()
      from op where a.operation_id = op.id and a.attempt = op.attempts and a.status in ('in_flight', 'unknown')
    ), approval as (
      update approvals ap set status = 'decided',
        decision = case when op.status = 'completed' then 'record_success' else 'abandon' end,
        decided_by = ev.actor, decided_at = now(), decision_evidence = ev.body,
        note = 'reconciled by event ' || ev.source || '/' || ev.event_id
      from op, ev where ap.operation_id = op.id and ap.status = 'pending'
      returning ap.id
    ), refused as (
      select o.id, ${refusal} as note from operations o, ev where o.operation_key = ev.operation_key
    ), closed as (
      update operation_evidence e set settled_at = now(),
        status = (case when exists (select 1 from op) then 'applied'
          when r.note is not null then 'not_applicable' else 'superseded' end)::evidence_status,
        note = case when exists (select 1 from op) then null else r.note end,
        operation_id = coalesce((select id from op), s.id)
      from ev left join operations s on s.operation_key = ev.operation_key
        left join refused r on r.id = s.id
      where e.id = ev.id and (exists (select 1 from op) or r.note is not null
        or s.status in ('completed', 'failed', 'compensated', 'abandoned'))
      returning e.status::text as status
    ), audit as (
      ${insertAudit(
        client,
        client`select op.id, op.operation_key, 'reconciled_by_event', op.from_status, op.status::text, ev.actor,
          ev.body || jsonb_build_object('note', 'reconciled by event ' || ev.source || '/' || ev.event_id,
            'approvalId', (select id from approval))
        from op, ev`,
      )}
    )
    select op.*, ev.actor as evidence_actor, (select status from closed) as evidence_status
    from ev left join op on true`
  if (row === undefined) return { kind: 'none' }
  if (row.evidence_status === 'applied') {
    return { kind: 'applied', op: toOperation(row), event: String(row.evidence_actor).slice('event:'.length) }
  }
  if (row.evidence_status === 'not_applicable') return { kind: 'not_applicable' }
  return row.evidence_status === 'superseded' ? { kind: 'superseded' } : { kind: 'none' }
}

/** A saga abort starts the undo of a completed operation (leased by `leaseCompleted`). */
export const startCompensation = (db: Database, held: Held, attempt: number | undefined) =>
  change(db.$client, held, {
    set: undefined,
    event: 'undo_started',
    details: { attempt, reason: 'saga_abort' },
  })

export const recordCompensated = (db: Database, held: Held) =>
  change(db.$client, held, {
    set: (sql) => sql`status = 'compensated', lease_token = null, lease_until = null`,
    event: 'compensated',
    details: { reason: 'saga_abort' },
  })

/**
 * Takes a lease on an operation in `status` whose lease is free, without changing its status (the
 * reconciler on `needs_reconciliation`, a saga abort on `completed`): two of them never both decide.
 */
export async function leaseIn(
  db: Database,
  where: { id: string } | { key: string; tool: string },
  status: OperationStatus,
  token: string,
  leaseMs: number,
): Promise<OperationRow | undefined> {
  const client = db.$client
  const match =
    'id' in where ? client`id = ${where.id}` : client`operation_key = ${where.key} and tool = ${where.tool}`
  const [row] = await client`
    update operations set lease_token = ${token}, lease_until = ${lease(client, leaseMs)}, updated_at = now()
    where ${match} and status = ${status} and (lease_until is null or lease_until < now())
    returning *`
  return row === undefined ? undefined : toOperation(row)
}

export type { AppliedDecision, Claim, ClaimRequest, Question } from './operation-claims.js'
export { applyDecision, claimOperation, escalate } from './operation-claims.js'
