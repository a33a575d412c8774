import type postgres from 'postgres'
import { type Batcher, createBatcher } from './batcher.js'
import { type OperationRow, toOperation } from './operation-rows.js'
import type { EffectClass } from './outbound-schema.js'

// Two transitions of the state machine (db/operations.ts) in the form many callers share: the claim
// of a key never seen, with its first attempt in flight, and the success. Every call that succeeds
// makes them, so concurrent callers' rows go in one statement each (same rows, same audit entries as
// one by one). A key seen before takes the one-by-one claim in operation-claims.ts.

export interface FreshClaim {
  key: string
  tool: string
  effect: EffectClass
  payloadHash: string
  /** The arguments as JSON text (already canonical-checked by the hash). */
  argsJson: string
  leaseToken: string
  leaseMs: number
  actor: string
  /** Compensable tools: the undo of attempt 1, committed with it before the call goes out. */
  undoRefJson: string | null
  runId: string | null
  traceId: string | null
  toolCallId: string | null
}

export interface Completion {
  operationId: string
  leaseToken: string
  attempt: number
  resultJson: string | null
  downstreamId: string | null
  actor: string
}

export interface OperationBatches {
  /** The new operation, leased, attempt 1 in flight under the operation key; undefined when the key existed. */
  claimFresh: Batcher<FreshClaim, OperationRow | undefined>
  /** False when the lease was lost (another caller took the operation over). */
  complete: Batcher<Completion, boolean>
}

const byPool = new WeakMap<postgres.Sql, OperationBatches>()

/** The batchers of one pool: every ledger on that pool shares them, so its callers share statements. */
export function operationBatches(sql: postgres.Sql): OperationBatches {
  let batches = byPool.get(sql)
  if (batches === undefined) {
    batches = {
      claimFresh: createBatcher((claims) => claimFresh(sql, claims)),
      complete: createBatcher((completions) => complete(sql, completions)),
    }
    byPool.set(sql, batches)
  }
  return batches
}

/**
 * INSERT … ON CONFLICT DO NOTHING on the unique key, the first attempt and both audit entries
 * (`claimed`, `attempt_started`) in one statement. Concurrent claims of one key still meet on the
 * index: exactly one inserts, the rest find the row and take the one-by-one path.
 */
async function claimFresh(
  sql: postgres.Sql,
  claims: readonly FreshClaim[],
): Promise<(OperationRow | undefined)[]> {
  const rows = await sql`
    with input as (
      select * from unnest(
        ${claims.map((c) => c.key)}::text[], ${claims.map((c) => c.tool)}::text[],
        ${claims.map((c) => c.effect)}::effect_class[], ${claims.map((c) => c.payloadHash)}::text[],
        ${claims.map((c) => c.argsJson)}::text[], ${claims.map((c) => c.leaseToken)}::uuid[],
        ${claims.map((c) => c.leaseMs)}::int[], ${claims.map((c) => c.actor)}::text[],
        ${claims.map((c) => c.undoRefJson)}::text[], ${claims.map((c) => c.runId)}::text[],
        ${claims.map((c) => c.traceId)}::text[], ${claims.map((c) => c.toolCallId)}::text[]
      ) with ordinality as i(key, tool, effect, payload_hash, args, lease_token, lease_ms, actor, undo_ref,
                             run_id, trace_id, tool_call_id, position)),
    inserted as (
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status, lease_token,
                              lease_until, attempts, round_attempts, undo_ref, run_id, trace_id, tool_call_id)
      select key, tool, effect, payload_hash, args::jsonb, 'in_progress', lease_token,
             now() + lease_ms * interval '1 millisecond', 1, 1, undo_ref::jsonb, run_id, trace_id, tool_call_id
      from input order by position
      on conflict (operation_key) do nothing
      returning *),
    attempt as (
      insert into operation_attempts (operation_id, attempt, attempt_key, undo_ref)
      select id, 1, operation_key, undo_ref from inserted),
    audit as (
      insert into operation_audit (operation_id, operation_key, event, from_status, to_status, actor, details)
      select n.id, n.operation_key, e.event, e.from_status::operation_status, 'in_progress', i.actor, e.details
      from inserted n join input i on i.lease_token = n.lease_token
      cross join lateral (values
        (1, 'claimed', null, jsonb_strip_nulls(jsonb_build_object(
          'runId', n.run_id, 'traceId', n.trace_id, 'toolCallId', n.tool_call_id))),
        (2, 'attempt_started', 'in_progress', jsonb_build_object(
          'attempt', 1, 'attemptKey', n.operation_key, 'undoRef', n.undo_ref))
      ) as e(step, event, from_status, details)
      order by i.position, e.step)
    select * from inserted`
  const byToken = new Map(rows.map((row) => [String(row.lease_token), row]))
  return claims.map((claim) => {
    const row = byToken.get(claim.leaseToken)
    return row === undefined ? undefined : toOperation(row)
  })
}

/** The success transition: completed with the result, the attempt succeeded, one audit entry each. */
async function complete(sql: postgres.Sql, completions: readonly Completion[]): Promise<boolean[]> {
  const rows = await sql<{ id: string }[]>`
    with input as (
      select * from unnest(
        ${completions.map((c) => c.operationId)}::uuid[], ${completions.map((c) => c.leaseToken)}::uuid[],
        ${completions.map((c) => c.attempt)}::int[], ${completions.map((c) => c.resultJson)}::text[],
        ${completions.map((c) => c.downstreamId)}::text[], ${completions.map((c) => c.actor)}::text[]
      ) with ordinality as i(id, lease_token, attempt, result, downstream_id, actor, position)),
    completed as (
      update operations o
      set status = 'completed', result_json = i.result::jsonb, downstream_id = i.downstream_id,
          last_error = null, lease_token = null, lease_until = null, completed_at = now(), updated_at = now()
      from input i
      -- By primary key only (status compared as text, as in the lease of src/db/events.ts): with the
      -- status index the planner read every in-progress operation and filtered them per batch.
      where o.id = i.id and o.lease_token = i.lease_token and o.status::text = 'in_progress'
      returning o.id, o.operation_key, i.attempt, i.actor, i.downstream_id, i.position),
    attempt as (
      update operation_attempts a set status = 'succeeded', finished_at = clock_timestamp()
      from completed c where a.operation_id = c.id and a.attempt = c.attempt),
    audit as (
      insert into operation_audit (operation_id, operation_key, event, from_status, to_status, actor, details)
      select id, operation_key, 'succeeded', 'in_progress', 'completed', actor,
             jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'downstreamId', downstream_id))
      from completed order by position)
    select id from completed`
  const completed = new Set(rows.map((row) => row.id))
  return completions.map((completion) => completed.has(completion.operationId))
}
