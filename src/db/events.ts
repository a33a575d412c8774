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

/**
 * Takes the row for one attempt: counts the attempt and sets a lease, committed before the handler
 * runs, so a crash inside the handler is still counted and the next worker can take over once the
 * lease expires.
 */
export async function leaseEvent(
  client: postgres.Sql,
  id: string,
  token: string,
  leaseMs: number,
): Promise<LeaseResult> {
  const [row] = await client<
    Array<{
      id: string
      source: string
      event_id: string
      event_type: string | null
      body: Buffer
      headers: Record<string, string>
      attempts: number
      received_at: string | Date
    }>
  >`
    update inbound_events
    set status = 'processing', attempts = attempts + 1, lease_token = ${token},
        lease_until = now() + ${leaseMs} * interval '1 millisecond',
        enqueued_at = coalesce(enqueued_at, now()), updated_at = now()
    where id = ${id}
      and (status = 'pending' or (status = 'processing' and lease_until < now()))
    returning id, source, event_id, event_type, body, headers, attempts, received_at`
  if (row !== undefined) {
    return {
      kind: 'leased',
      row: {
        id: row.id,
        source: row.source,
        eventId: row.event_id,
        eventType: row.event_type,
        body: row.body,
        headers: row.headers,
        attempts: row.attempts,
        receivedAt: new Date(row.received_at),
      },
    }
  }
  const [current] = await client<Array<{ status: EventStatus; lease_until: string | Date | null }>>`
    select status, lease_until from inbound_events where id = ${id}`
  if (current === undefined) return { kind: 'missing' }
  if (current.status === 'processing' && current.lease_until !== null) {
    return { kind: 'held', until: new Date(current.lease_until) }
  }
  return { kind: 'finished', status: current.status }
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
      (event_row_id, attempt, replay, outcome, response_status, response_excerpt, started_at)
    select id, ${record.attempt}, replays, 'done', ${record.responseStatus ?? null}, ${record.responseExcerpt ?? null},
           ${record.startedAt.toISOString()}::timestamptz
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
        (event_row_id, attempt, replay, outcome, error, response_status, response_excerpt, started_at)
      select id, ${record.attempt}, replays, 'error', ${record.error}, ${record.responseStatus ?? null},
             ${record.responseExcerpt ?? null}, ${record.startedAt.toISOString()}::timestamptz
      from failed)
    select status from failed`
  return row?.status
}
