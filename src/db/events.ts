import { sql } from 'drizzle-orm'
import type postgres from 'postgres'
import type { Transaction } from './client.js'
import type { AttemptRecord } from './event-records.js'
import { type PeriodTable, periodTablesOf } from './period-tables.js'
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
  await periodTablesOf(client).run(
    ids,
    (tableOf) => client`
      update ${client(tableOf('inbound_events'))} e set enqueued_at = now(), job_id = i.job_id
      -- Each array behind a subquery, so one plan serves every batch size (see claimStatement).
      from unnest((select ${rows.map((row) => row.id)}::text[])::uuid[], (select ${rows.map((row) => row.jobId)}::text[]))
        as i(id, job_id)
      where e.id = i.id and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid and e.enqueued_at is null`,
  )
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
): Promise<LeaseResult[]> {
  const ids = rowIdRange(requests.map((r) => r.id))
  const lease = (tableOf: (table: PeriodTable) => string) => client<
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
      select e.id, input.token, input.job_id from ${client(tableOf('inbound_events'))} e join input on input.id = e.id
      where e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid
        and (e.status::text = 'pending' or (e.status::text = 'processing' and e.lease_until < now()))
      for update of e skip locked),
    leased as (
      update ${client(tableOf('inbound_events'))} e
      set status = 'processing', attempts = e.attempts + 1, lease_token = picked.token,
          lease_until = now() + ${leaseMs} * interval '1 millisecond',
          enqueued_at = coalesce(e.enqueued_at, now()),
          job_id = case when e.enqueued_at is null then picked.job_id else e.job_id end, updated_at = now()
      from picked where e.id = picked.id and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid
      returning e.id, e.lease_token, e.source, e.event_id, e.event_type, e.headers, e.attempts,
                e.received_at, e.status, e.lease_until, e.trace_parent),
    bodies as (
      -- Each leased row with its bytes: one primary-key probe per row (the table the claim wrote
      -- them to with the row: migration 0020), in a subquery so that no plan can scan every payload
      -- between the batch's lowest and highest id instead: a relay's or a retry's batch may span
      -- hours of them.
      select l.*,
             (select p.body from ${client(tableOf('inbound_event_payloads'))} p
              where p.event_row_id = l.id
                and p.event_row_id between ${ids.lowest}::uuid and ${ids.highest}::uuid) as body
      from leased l)
    select l.id, l.lease_token, true as leased, l.source, l.event_id, l.event_type, l.body, l.headers, l.attempts,
           l.received_at, l.status, l.lease_until, l.trace_parent
    from bodies l
    union all
    select e.id, e.lease_token, false, e.source, e.event_id, null, null, null, e.attempts, e.received_at,
           e.status, e.lease_until, null
    from ${client(tableOf('inbound_events'))} e
    where e.id = any((select ${requests.map((r) => r.id)}::text[])::uuid[]) and e.id not in (select id from leased)
      and e.id between ${ids.lowest}::uuid and ${ids.highest}::uuid`
  const rows = await periodTablesOf(client).run(ids, lease)
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
 * Gives a leased row back without counting the attempt: the handler could not start yet (a
 * destination's limit or open circuit, a disabled route, a route's operation still leased by a
 * worker that died), so it runs again at `retryAt` with its attempts intact.
 */
export async function releaseLease(
  client: postgres.Sql,
  id: string,
  token: string,
  retryAt: Date,
  /** What the try sent and was answered, recorded as an attempt row with outcome `paused`. */
  sent?: AttemptRecord & { error: string },
) {
  // Not sent until awaited: alone when the try sent nothing, else inside the statement that records it.
  const release = client`
    update inbound_events
    set status = 'pending', attempts = greatest(attempts - 1, 0), lease_token = null, lease_until = null,
        next_attempt_at = ${retryAt.toISOString()}::timestamptz, updated_at = now()
    where id = ${id} and lease_token = ${token}
    returning id, replays`
  if (sent === undefined) {
    await release
    return
  }
  await client`
    with released as (${release})
    insert into event_attempts
      (event_row_id, attempt, replay, outcome, error, response_status, response_excerpt, started_at, finished_at)
    select id, ${sent.attempt}, replays, 'paused', ${sent.error}, ${sent.responseStatus ?? null},
           ${sent.responseExcerpt ?? null}, ${sent.startedAt.toISOString()}::timestamptz, clock_timestamp()
    from released`
}

/**
 * Renews a lease this attempt still holds (its token unchanged): a row that waited for a handler
 * slot starts its handler with a whole lease. Guarded by the token, so a lease another worker took
 * over stays theirs; false then.
 */
export async function renewLease(
  client: postgres.Sql,
  id: string,
  token: string,
  leaseMs: number,
): Promise<boolean> {
  const rows = await client`
    update inbound_events
    set lease_until = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
    where id = ${id} and lease_token = ${token} and status = 'processing'
    returning id`
  return rows.length === 1
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
