import { sql } from 'drizzle-orm'
import type postgres from 'postgres'
import type { Transaction } from './client.js'
import type { AttemptRecord } from './event-records.js'
import { freshClaimWrites } from './operation-batches.js'
import { type OperationRow, toOperation } from './operation-rows.js'
import { rowIdRange } from './row-id-range.js'
import type { EventStatus } from './schema.js'

// The worker's statements, in SQL rather than drizzle's builder: they run several times per event
// on the hot path, where the builder costs more than the statement (see src/db/claims.ts).

/** A row and the job it was added in. */
export interface EnqueuedRow {
  id: string
  jobId: string
}

/**
 * Records that jobs for these rows are in the queue, and which, so the relay leaves them alone. Only
 * a row's first enqueue is recorded here: the api's enqueue and the relay's may race for a row, and
 * either job runs it; a lease records its job on a row not marked yet (leaseEvents), which this then
 * leaves as it is. A job that replaces a lost one is recorded by markRequeued.
 */
export async function markEnqueued(client: postgres.Sql, rows: readonly EnqueuedRow[]): Promise<void> {
  if (rows.length === 0) return
  const ids = rowIdRange(rows.map((row) => row.id))
  await client`
    update inbound_events e set enqueued_at = now(), job_id = i.job_id
    -- Each array behind a subquery, so one plan serves every batch size (see claimStatement).
    from unnest((select ${rows.map((row) => row.id)}::text[])::uuid[], (select ${rows.map((row) => row.jobId)}::text[]))
      as i(id, job_id)
    where e.id = i.id and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid and e.enqueued_at is null`
}

/**
 * PENDING rows found without a live job: no job is known for them until one is added again, so they
 * count as unqueued (hookledger_events_unqueued) and the relay's every-tick pass retries them.
 */
export async function markUnqueued(client: postgres.Sql, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return
  await client`
    update inbound_events set enqueued_at = null where id = any(${ids}::uuid[]) and status = 'pending'`
}

/**
 * Records the jobs that replace lost ones (the relay's orphan recovery, a replay): the relay's next
 * check of a row asks about this job, not the lost one.
 */
export async function markRequeued(client: postgres.Sql, rows: readonly EnqueuedRow[]): Promise<void> {
  if (rows.length === 0) return
  const ids = rowIdRange(rows.map((row) => row.id))
  await client`
    update inbound_events e set enqueued_at = coalesce(e.enqueued_at, now()), job_id = i.job_id
    from unnest(${rows.map((row) => row.id)}::uuid[], ${rows.map((row) => row.jobId)}::text[]) as i(id, job_id)
    where e.id = i.id and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid`
}

/** What a worker needs of a leased row. */
export interface LeasedEvent {
  id: string
  source: string
  eventId: string
  eventType: string | null
  body: Buffer
  headers: Record<string, string>
  /** This attempt's number, crashed attempts included. */
  attempts: number
  receivedAt: Date
  /** Its forward operation, claimed by the lease with attempt 1 in flight (ForwardClaims). */
  forwardClaim?: OperationRow | undefined
  /** The receive span's W3C traceparent (tracing on at receive time); null: none. */
  traceParent: string | null
}

export type LeaseResult =
  | { kind: 'leased'; row: LeasedEvent }
  | { kind: 'finished'; status: EventStatus }
  /** Another worker's lease is live until then. */
  | { kind: 'held'; until: Date }
  /**
   * Free to lease, but locked by a statement under way: an enqueue mark or the relay's check of
   * the row, another worker's lease committing this moment, or (rarely, and for longer) a code
   * handler's transaction still running past its lease. A look a moment later decides.
   */
  | { kind: 'locked' }
  | { kind: 'missing' }

/**
 * Sources whose handler is the configured forward and nothing else: the lease also claims each leased
 * event's forward operation, as the forward's invoke would (see leaseEvents), one statement fewer per
 * event. `leaseMs` is the operation's lease per source, as the ledger takes it for the forward tool.
 */
export interface ForwardClaims {
  sources: readonly string[]
  leaseMs: readonly number[]
}

export const NO_FORWARD_CLAIMS: ForwardClaims = { sources: [], leaseMs: [] }

export interface LeaseRequest {
  id: string
  /** This attempt's own token: it guards every later write of the attempt. */
  token: string
  /**
   * The job that carries the row: recorded on a row no enqueue mark has reached yet, as that mark
   * would have (the intake marks its rows a while after adding their jobs; see createEnqueuer).
   */
  jobId: string
}

/**
 * Takes rows for one attempt each: counts the attempt and sets a lease, committed before any handler
 * runs, so a crash inside a handler is still counted and the next worker can take over once the
 * lease expires. One statement for all of a turn's jobs. A row another worker is leasing right now
 * is skipped, not waited for, and a row asked for twice in one batch is leased once.
 */
export async function leaseEvents(
  client: postgres.Sql,
  requests: readonly LeaseRequest[],
  leaseMs: number,
  forwards: ForwardClaims = NO_FORWARD_CLAIMS,
): Promise<LeaseResult[]> {
  const ids = rowIdRange(requests.map((r) => r.id))
  const rows = await client<
    Array<{
      id: string
      lease_token: string | null
      leased: boolean
      source: string
      event_id: string
      event_type: string | null
      body: Buffer | null
      headers: Record<string, string> | null
      attempts: number
      received_at: string | Date
      status: EventStatus
      lease_until: string | Date | null
      forward_claim: Record<string, unknown> | null
      trace_parent: string | null
    }>
  >`
    with input as (
      select distinct on (id) id, token, job_id
      from unnest((select ${requests.map((r) => r.id)}::text[])::uuid[],
                  (select ${requests.map((r) => r.token)}::text[])::uuid[],
                  (select ${requests.map((r) => r.jobId)}::text[]))
        with ordinality as i(id, token, job_id, position)
      order by id, position),
    picked as (
      -- Found by primary key only: status is compared as text so that the status index cannot
      -- serve it. A big ledger is analyzed rarely, so its statistics say almost nothing is
      -- PENDING, and the planner then reads every PENDING row of a backlog for each lease (62 ms
      -- instead of 0.8 for 30 rows, with 3,000 PENDING in a 2M-row ledger).
      select e.id, input.token, input.job_id from inbound_events e join input on input.id = e.id
      where e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid
        and (e.status::text = 'pending' or (e.status::text = 'processing' and e.lease_until < now()))
      for update of e skip locked),
    leased as (
      update inbound_events e
      set status = 'processing', attempts = e.attempts + 1, lease_token = picked.token,
          lease_until = now() + ${leaseMs} * interval '1 millisecond',
          enqueued_at = coalesce(e.enqueued_at, now()),
          job_id = case when e.enqueued_at is null then picked.job_id else e.job_id end, updated_at = now()
      from picked where e.id = picked.id and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid
      returning e.id, e.lease_token, e.source, e.event_id, e.event_type, e.headers, e.attempts,
                e.received_at, e.status, e.lease_until, e.trace_parent),
    bodies as (
      -- Each leased row with its bytes and the run id its forward claim is recorded under, computed
      -- once. The bytes are one primary-key probe per row (the table the claim wrote them to with the
      -- row: migration 0020), in a subquery so that no plan can scan every payload between the
      -- batch's lowest and highest id instead: a relay's or a retry's batch may span hours of them.
      -- Everything after joins this one relation: the planner takes every CTE for one row and joins
      -- two of them by a nested loop, which, with each row's claim found by a subquery that rendered
      -- its id as text for every claim, compared every row with every other (a third of the CPU).
      select l.*, l.id::text || '/' || l.attempts as run_id,
             (select p.body from inbound_event_payloads p
              where p.event_row_id = l.id
                and p.event_row_id between ${ids.lowest}::uuid and ${ids.highest}::uuid) as body
      from leased l),
    forward_rows as (
      select l.*, f.lease_ms from bodies l
      join unnest(${forwards.sources}::text[], ${forwards.leaseMs}::int[]) as f(source, lease_ms)
        on f.source = l.source
      where l.body is not null),
    ${forwardClaimInput(client)},
    ${freshClaimWrites(client)}
    select l.id, l.lease_token, true as leased, l.source, l.event_id, l.event_type, l.body, l.headers, l.attempts,
           l.received_at, l.status, l.lease_until, row_to_json(n) as forward_claim, l.trace_parent
    from bodies l left join inserted n on n.run_id = l.run_id
    union all
    select e.id, e.lease_token, false, e.source, e.event_id, null, null, null, e.attempts, e.received_at,
           e.status, e.lease_until, null, null
    from inbound_events e
    where e.id = any((select ${requests.map((r) => r.id)}::text[])::uuid[]) and e.id not in (select id from leased)
      and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid`
  const leasedByToken = new Map(rows.filter((row) => row.leased).map((row) => [row.lease_token, row]))
  const byId = new Map(rows.map((row) => [row.id, row]))
  return requests.map((request): LeaseResult => {
    const mine = leasedByToken.get(request.token)
    if (mine !== undefined && mine.body !== null) {
      return {
        kind: 'leased',
        row: {
          id: mine.id,
          source: mine.source,
          eventId: mine.event_id,
          eventType: mine.event_type,
          body: mine.body,
          headers: mine.headers ?? {},
          attempts: mine.attempts,
          receivedAt: new Date(mine.received_at),
          forwardClaim: mine.forward_claim === null ? undefined : toOperation(mine.forward_claim),
          traceParent: mine.trace_parent,
        },
      }
    }
    const current = byId.get(request.id)
    if (current === undefined) return { kind: 'missing' }
    if (current.status === 'processing' || current.status === 'pending') {
      // Held by another worker: look again once its lease runs out. A row no live lease holds was
      // skipped as locked.
      const until = current.lease_until === null ? 0 : new Date(current.lease_until).getTime()
      if (until <= Date.now()) return { kind: 'locked' }
      return { kind: 'held', until: new Date(Math.max(until, Date.now() + 1000)) }
    }
    return { kind: 'finished', status: current.status }
  })
}

/**
 * Locks the leased row inside the handler's transaction. While the lock is held no other worker can
 * take the row over, even after the lease runs out; false means another worker already did.
 */
export async function lockLeasedEvent(tx: Transaction, id: string, token: string): Promise<boolean> {
  const rows = await tx.execute(
    sql`select id from inbound_events where id = ${id} and lease_token = ${token} for update`,
  )
  return rows.length === 1
}

/**
 * Gives a leased row back without counting the attempt: the handler could not start yet (the forward
 * is still leased by a worker that died), so it runs again at `retryAt` with its attempts intact.
 */
export async function releaseLease(client: postgres.Sql, id: string, token: string, retryAt: Date) {
  await client`
    update inbound_events
    set status = 'pending', attempts = greatest(attempts - 1, 0), lease_token = null, lease_until = null,
        next_attempt_at = ${retryAt.toISOString()}::timestamptz, updated_at = now()
    where id = ${id} and lease_token = ${token}`
}

export interface HeldLease {
  id: string
  token: string
  leaseMs: number
}

/**
 * Renews a lease this attempt still holds (its token unchanged), with the lease of the forward
 * operation that the row's lease claimed, if any: a row that waited for a handler slot starts its
 * handler with a whole lease. Guarded by the tokens, so a lease another worker took over stays
 * theirs; false then.
 */
export async function renewLease(
  client: postgres.Sql,
  event: HeldLease,
  forward: HeldLease | undefined,
): Promise<boolean> {
  const [row] = await client<Array<{ renewed: boolean }>>`
    with event as (
      update inbound_events
      set lease_until = now() + ${event.leaseMs} * interval '1 millisecond', updated_at = now()
      where id = ${event.id} and lease_token = ${event.token} and status = 'processing'
      returning id),
    forward as (
      update operations
      set lease_until = now() + ${forward?.leaseMs ?? 0} * interval '1 millisecond', updated_at = now()
      where id = ${forward?.id ?? null}::uuid and lease_token = ${forward?.token ?? null}::uuid
        and status = 'in_progress' and exists (select 1 from event))
    select exists (select 1 from event) as renewed`
  return row?.renewed === true
}

/** Marks the row DONE in the handler's own transaction, so its writes and the mark commit together. */
export async function markDone(tx: Transaction, id: string, record: AttemptRecord): Promise<void> {
  await tx.execute(sql`
    with done as (
      update inbound_events
      set status = 'done', processed_at = now(), last_error = null, lease_token = null,
          lease_until = null, next_attempt_at = null, updated_at = now()
      where id = ${id}
      returning id, replays)
    insert into event_attempts
      (event_row_id, attempt, replay, outcome, response_status, response_excerpt, started_at, finished_at)
    select id, ${record.attempt}, replays, 'done', ${record.responseStatus ?? null}, ${record.responseExcerpt ?? null},
           ${record.startedAt.toISOString()}::timestamptz, clock_timestamp()
    from done`)
}

/**
 * Records a failed attempt: back to PENDING with the next attempt's time, or FAILED once the attempts
 * are used up. Guarded by the lease token, so a worker that lost its lease cannot overwrite the row.
 */
export async function markAttemptFailed(
  client: postgres.Sql,
  id: string,
  token: string,
  record: AttemptRecord & { error: string; final: boolean; retryAt: Date },
): Promise<EventStatus | undefined> {
  const [row] = await client<Array<{ status: EventStatus }>>`
    with failed as (
      update inbound_events
      set status = ${record.final ? 'failed' : 'pending'}::event_status, last_error = ${record.error},
          next_attempt_at = ${record.final ? null : record.retryAt.toISOString()}::timestamptz,
          lease_token = null, lease_until = null, updated_at = now()
      where id = ${id} and lease_token = ${token}
      returning id, status, replays),
    attempt as (
      insert into event_attempts
        (event_row_id, attempt, replay, outcome, error, response_status, response_excerpt, started_at, finished_at)
      select id, ${record.attempt}, replays, 'error', ${record.error}, ${record.responseStatus ?? null},
             ${record.responseExcerpt ?? null}, ${record.startedAt.toISOString()}::timestamptz, clock_timestamp()
      from failed)
    select status from failed`
  return row?.status
}

/**
 * freshClaimWrites' `claim_input` for the forwards of a relation `forward_rows` (id, source,
 * event_id, body, trace_parent, run_id, lease_ms): the claim the forward's invoke would make, so a
 * lease (leaseEvents) or a claim that leases its rows (src/db/claims.ts) takes it in its own statement.
 */
export function forwardClaimInput(
  client: postgres.Sql | postgres.TransactionSql,
): postgres.PendingQuery<postgres.Row[]> {
  return client`
    claim_input as (
      -- The claim the forward's invoke would make (src/delivery/source-forward.ts): the key is
      -- stepKey([source, event id], 'forward'), the payload hash is payloadHash({ source, eventId,
      -- bodySha256 }), RFC 8785 JSON whose keys sort as written here and whose strings to_json escapes
      -- as JSON.stringify does. test/queue/forward-claim.test.ts holds both to the same answers.
      -- stepKey measures in UTF-16 units: characters plus one per character beyond U+FFFF (an ASCII
      -- string, one byte per character, is counted without the regular expression). A key
      -- over 255 has each part over 64 replaced by '%h' and its base64url sha256 (src/outbound/keys.ts);
      -- with a source of at most 63 characters that always fits, so its last resort is never needed.
      select c.key, 'forward'::text as tool, 'idempotent'::effect_class as effect,
             encode(sha256(convert_to('{"bodySha256":' || to_json(c.body_sha256)::text || ',"eventId":' ||
               to_json(l.event_id)::text || ',"source":' || to_json(l.source)::text || '}', 'UTF8')), 'hex')
               as payload_hash,
             jsonb_build_object('source', l.source, 'eventId', l.event_id, 'bodySha256', c.body_sha256)::text
               as args,
             gen_random_uuid() as lease_token, l.lease_ms, 'runtime'::text as actor, null::text as undo_ref,
             l.run_id, split_part(l.trace_parent, '-', 2) as trace_id,
             null::text as tool_call_id,
             row_number() over (order by l.id) as position
      from forward_rows l
      cross join lateral (select s.source, s.event_id,
        case when octet_length(s.source) = char_length(s.source) then char_length(s.source)
          else char_length(s.source) + char_length(regexp_replace(s.source, '[^\\U00010000-\\U0010FFFF]', '', 'g'))
        end as source_units,
        case when octet_length(s.event_id) = char_length(s.event_id) then char_length(s.event_id)
          else char_length(s.event_id) + char_length(regexp_replace(s.event_id, '[^\\U00010000-\\U0010FFFF]', '', 'g'))
        end as event_id_units
        from (select replace(replace(l.source, '%', '%25'), ':', '%3A') as source,
                     replace(replace(l.event_id, '%', '%25'), ':', '%3A') as event_id) s) p
      cross join lateral (select
        case when p.source_units + p.event_id_units + 9 <= 255
          then p.source || ':' || p.event_id || ':forward'
          else (case when p.source_units <= 64 then p.source
                  else '%h' || translate(encode(sha256(convert_to(p.source, 'UTF8')), 'base64'), '+/=', '-_') end)
            || ':' ||
               (case when p.event_id_units <= 64 then p.event_id
                  else '%h' || translate(encode(sha256(convert_to(p.event_id, 'UTF8')), 'base64'), '+/=', '-_') end)
            || ':forward'
        end as key,
        encode(sha256(l.body), 'hex') as body_sha256) c)`
}
