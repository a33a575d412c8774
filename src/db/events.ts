import { sql } from 'drizzle-orm'
import type postgres from 'postgres'
import type { Transaction } from './client.js'
import type { EventStatus } from './schema.js'

// The worker's statements, in SQL rather than drizzle's builder: they run several times per event
// on the hot path, where the builder costs more than the statement (see src/db/claims.ts).

/** Records that jobs for these rows are in the queue, so the relay leaves them alone. */
export async function markEnqueued(client: postgres.Sql, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return
  await client`update inbound_events set enqueued_at = now() where id = any(${ids}::uuid[]) and enqueued_at is null`
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
}

export type LeaseResult =
  | { kind: 'leased'; row: LeasedEvent }
  | { kind: 'finished'; status: EventStatus }
  | { kind: 'held'; until: Date }
  | { kind: 'missing' }

export interface LeaseRequest {
  id: string
  /** This attempt's own token: it guards every later write of the attempt. */
  token: string
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
    }>
  >`
    with input as (
      select distinct on (id) id, token
      from unnest(${requests.map((r) => r.id)}::uuid[], ${requests.map((r) => r.token)}::uuid[])
        with ordinality as i(id, token, position)
      order by id, position),
    picked as (
      -- Found by primary key only: status is compared as text so that the status index cannot
      -- serve it. A big ledger is analyzed rarely, so its statistics say almost nothing is
      -- PENDING, and the planner then reads every PENDING row of a backlog for each lease (62 ms
      -- instead of 0.8 for 30 rows, with 3,000 PENDING in a 2M-row ledger).
      select e.id, input.token from inbound_events e join input on input.id = e.id
      where e.status::text = 'pending' or (e.status::text = 'processing' and e.lease_until < now())
      for update of e skip locked),
    leased as (
      update inbound_events e
      set status = 'processing', attempts = e.attempts + 1, lease_token = picked.token,
          lease_until = now() + ${leaseMs} * interval '1 millisecond',
          enqueued_at = coalesce(e.enqueued_at, now()), updated_at = now()
      from picked where e.id = picked.id
      returning e.id, e.lease_token, e.source, e.event_id, e.event_type, e.body, e.headers, e.attempts,
                e.received_at, e.status, e.lease_until)
    select id, lease_token, true as leased, source, event_id, event_type, body, headers, attempts,
           received_at, status, lease_until
    from leased
    union all
    select e.id, e.lease_token, false, e.source, e.event_id, null, null, null, e.attempts, e.received_at,
           e.status, e.lease_until
    from inbound_events e
    where e.id = any(${requests.map((r) => r.id)}::uuid[]) and e.id not in (select id from leased)`
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
        },
      }
    }
    const current = byId.get(request.id)
    if (current === undefined) return { kind: 'missing' }
    if (current.status === 'processing' || current.status === 'pending') {
      // Held by another worker (or locked by one that is taking it right now): look again later.
      const until = current.lease_until === null ? 0 : new Date(current.lease_until).getTime()
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

export interface AttemptRecord {
  attempt: number
  startedAt: Date
  responseStatus?: number | undefined
  responseExcerpt?: string | undefined
}

export interface DoneRecord extends AttemptRecord {
  id: string
  token: string
  finishedAt: Date
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
