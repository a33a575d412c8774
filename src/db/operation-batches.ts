import type postgres from 'postgres'
import { type Batcher, createBatcher } from './batcher.js'
import type { DoneRecord } from './event-records.js'
import { insertAudit } from './operation-audit.js'
import { type OperationRow, toOperation } from './operation-rows.js'
import type { EffectClass } from './outbound-schema.js'
import { type PeriodTable, periodTablesOf } from './period-tables.js'
import { rowIdRange } from './row-id-range.js'

// The statements every forwarded event makes, in the form many callers share, one statement each for
// all of them (same rows, same audit entries as one by one): the claim of an operation key never
// seen, with its first attempt in flight (a key seen before takes the one-by-one claim in
// operation-claims.ts), and the settle: an operation's success, or an inbound event's DONE mark.

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

/** An operation's success, or an event's DONE mark. */
export type Settlement =
  | { completion: Completion; done?: undefined }
  | { completion?: undefined; done: DoneRecord }

export interface Settled {
  /** False when the operation's lease was lost (another caller took it over). */
  completed: boolean
  /** False when the event's lease was lost. */
  done: boolean
}

export interface OperationBatches {
  /** The new operation, leased, attempt 1 in flight under the operation key; undefined when the key existed. */
  claimFresh: Batcher<FreshClaim, OperationRow | undefined>
  settle: Batcher<Settlement, Settled>
}

const byPool = new WeakMap<postgres.Sql, OperationBatches>()

/** The batchers of one pool: every ledger on that pool shares them, so its callers share statements. */
export function operationBatches(sql: postgres.Sql): OperationBatches {
  let batches = byPool.get(sql)
  if (batches === undefined) {
    batches = {
      claimFresh: createBatcher((claims) => claimFresh(sql, claims)),
      settle: createBatcher((settlements) => settle(sql, settlements)),
    }
    byPool.set(sql, batches)
  }
  return batches
}

/**
 * A claim's writes, over a relation `claim_input` with FreshClaim's columns (`args` and `undo_ref`
 * as JSON text) and a `position`: INSERT … ON CONFLICT DO NOTHING on the unique key, the first
 * attempt and one audit entry: `claimed`, whose details say that attempt 1 started with it (under
 * the operation key, with its undo reference). Concurrent claims of one key still meet on the index:
 * exactly one inserts, the rest find the row and take the one-by-one path.
 */
function freshClaimWrites(
  sql: postgres.Sql | postgres.TransactionSql,
): postgres.PendingQuery<postgres.Row[]> {
  return sql`
    inserted as (
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status, lease_token,
                              lease_until, attempts, round_attempts, undo_ref, run_id, trace_id, tool_call_id)
      select key, tool, effect, payload_hash, args::jsonb, 'in_progress', lease_token,
             now() + lease_ms * interval '1 millisecond', 1, 1, undo_ref::jsonb, run_id, trace_id, tool_call_id
      from claim_input order by position
      on conflict (operation_key) do nothing
      returning *),
    attempt as (
      insert into operation_attempts (operation_id, attempt, attempt_key, undo_ref)
      select id, 1, operation_key, undo_ref from inserted),
    audit as (
      ${insertAudit(
        sql,
        sql`select n.id, n.operation_key, 'claimed', null, 'in_progress', i.actor,
          jsonb_strip_nulls(jsonb_build_object('runId', n.run_id, 'traceId', n.trace_id,
            'toolCallId', n.tool_call_id, 'attempt', 1, 'undoRef', n.undo_ref))
        from inserted n join claim_input i on i.lease_token = n.lease_token
        order by i.position`,
      )})`
}

/** The claims of keys never seen, with their first attempts in flight, in one statement. */
async function claimFresh(
  sql: postgres.Sql,
  claims: readonly FreshClaim[],
): Promise<(OperationRow | undefined)[]> {
  // Each array behind a subquery, so one plan serves every batch size (see claimStatement).
  const rows = await sql`
    with claim_input as (
      select * from unnest(
        (select ${claims.map((c) => c.key)}::text[]), (select ${claims.map((c) => c.tool)}::text[]),
        (select ${claims.map((c) => c.effect)}::text[])::effect_class[],
        (select ${claims.map((c) => c.payloadHash)}::text[]), (select ${claims.map((c) => c.argsJson)}::text[]),
        (select ${claims.map((c) => c.leaseToken)}::text[])::uuid[],
        (select ${claims.map((c) => String(c.leaseMs))}::text[])::int[], (select ${claims.map((c) => c.actor)}::text[]),
        (select ${claims.map((c) => c.undoRefJson)}::text[]), (select ${claims.map((c) => c.runId)}::text[]),
        (select ${claims.map((c) => c.traceId)}::text[]), (select ${claims.map((c) => c.toolCallId)}::text[])
      ) with ordinality as i(key, tool, effect, payload_hash, args, lease_token, lease_ms, actor, undo_ref,
                             run_id, trace_id, tool_call_id, position)),
    ${freshClaimWrites(sql)}
    select * from inserted`
  const byToken = new Map(rows.map((row) => [String(row.lease_token), row]))
  return claims.map((claim) => {
    const row = byToken.get(claim.leaseToken)
    return row === undefined ? undefined : toOperation(row)
  })
}

/**
 * The success transitions (completed with the result, the attempt succeeded, one audit entry) and the
 * DONE marks (guarded by the attempt's lease token, with its attempt row) of a batch, in one statement.
 */
async function settle(sql: postgres.Sql, settlements: readonly Settlement[]): Promise<Settled[]> {
  const column = <T>(value: (settlement: Settlement) => T | undefined) =>
    settlements.map((settlement) => {
      const found = value(settlement)
      return found === undefined || found === null ? null : String(found)
    })
  const events = rowIdRange(settlements.map((settlement) => settlement.done?.id))
  const statement = (tableOf: (table: PeriodTable) => string) => sql<
    Array<{ position: string; kind: 'completed' | 'done' }>
  >`
    with input as (
      -- Every array travels as text[] (postgres-js serialises those, nulls included, reliably) and is
      -- cast here; each behind a subquery, so one plan serves every batch size (see claimStatement).
      select op_id::uuid, op_token::uuid, op_attempt::int, result, downstream_id, actor,
             event_id::uuid, event_token::uuid, event_attempt::int, started_at::timestamptz,
             finished_at::timestamptz, response_status::int, response_excerpt, position
      from unnest(
        (select ${column((s) => s.completion?.operationId)}::text[]), (select ${column((s) => s.completion?.leaseToken)}::text[]),
        (select ${column((s) => s.completion?.attempt)}::text[]), (select ${column((s) => s.completion?.resultJson)}::text[]),
        (select ${column((s) => s.completion?.downstreamId)}::text[]), (select ${column((s) => s.completion?.actor)}::text[]),
        (select ${column((s) => s.done?.id)}::text[]), (select ${column((s) => s.done?.token)}::text[]),
        (select ${column((s) => s.done?.attempt)}::text[]), (select ${column((s) => s.done?.startedAt.toISOString())}::text[]),
        (select ${column((s) => s.done?.finishedAt.toISOString())}::text[]),
        (select ${column((s) => s.done?.responseStatus)}::text[]), (select ${column((s) => s.done?.responseExcerpt)}::text[])
      ) with ordinality as i(op_id, op_token, op_attempt, result, downstream_id, actor, event_id, event_token,
                             event_attempt, started_at, finished_at, response_status, response_excerpt, position)),
    completed as (
      update operations o
      set status = 'completed', result_json = i.result::jsonb, downstream_id = i.downstream_id,
          last_error = null, lease_token = null, lease_until = null, completed_at = now(), updated_at = now()
      from input i
      -- By primary key only (status compared as text, as in the lease of src/db/events.ts): with the
      -- status index the planner read every in-progress operation and filtered them per batch.
      where o.id = i.op_id and o.lease_token = i.op_token and o.status::text = 'in_progress'
      returning o.id, o.operation_key, i.op_attempt as attempt, i.actor, i.downstream_id, i.position),
    attempt as (
      update operation_attempts a set status = 'succeeded', finished_at = clock_timestamp()
      from completed c where a.operation_id = c.id and a.attempt = c.attempt),
    audit as (
      ${insertAudit(
        sql,
        sql`select id, operation_key, 'succeeded', 'in_progress', 'completed', actor,
          jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'downstreamId', downstream_id))
        from completed order by position`,
      )}),
    done as (
      update ${sql(tableOf('inbound_events'))} e
      set status = 'done', processed_at = i.finished_at, last_error = null, lease_token = null,
          lease_until = null, next_attempt_at = null, updated_at = now()
      from input i
      where e.id = i.event_id and e.id between ${events.lowest}::uuid and ${events.highest}::uuid
        and e.lease_token = i.event_token
      returning e.id, e.replays, i.position),
    event_attempt as (
      insert into event_attempts
        (event_row_id, attempt, replay, outcome, response_status, response_excerpt, started_at, finished_at)
      select d.id, i.event_attempt, d.replays, 'done', i.response_status, i.response_excerpt, i.started_at,
             i.finished_at
      from done d join input i on i.position = d.position)
    select position::text, 'completed' as kind from completed
    union all
    select position::text, 'done' from done`
  const rows = await periodTablesOf(sql).run(events, statement)
  const completed = new Set(rows.filter((row) => row.kind === 'completed').map((row) => Number(row.position)))
  const done = new Set(rows.filter((row) => row.kind === 'done').map((row) => Number(row.position)))
  // with ordinality counts from 1
  return settlements.map((_, index) => ({ completed: completed.has(index + 1), done: done.has(index + 1) }))
}
