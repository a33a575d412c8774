import { eq, type SQL, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { type EventStatus, inboundEvents } from './schema.js'

/** Where a bulk replay stands in (received_at, id) order; received_at keeps its microseconds. */
export interface ReplayPosition {
  receivedAt: string
  id: string
}

export type FlippedRow = ReplayPosition

export type ReplayOutcome =
  | { kind: 'replayed'; id: string }
  | { kind: 'not_failed'; status: EventStatus }
  | { kind: 'not_found' }

/**
 * Replays one FAILED event: back to PENDING with a fresh round of attempts, so the worker runs its
 * handler again under the full retry budget. Only FAILED events: a DONE event's effects happened, and
 * a PENDING or PROCESSING one is still owned by the worker. The caller then requeues the row.
 */
export async function replayEvent(db: Database, id: string, by: string): Promise<ReplayOutcome> {
  const [flipped] = await flipFailed(db, eq(inboundEvents.id, id), by, 1)
  if (flipped !== undefined) return { kind: 'replayed', id: flipped.id }
  const [current] = await db
    .select({ status: inboundEvents.status })
    .from(inboundEvents)
    .where(eq(inboundEvents.id, id))
  return current === undefined ? { kind: 'not_found' } : { kind: 'not_failed', status: current.status }
}

/**
 * One statement: lock the FAILED rows (oldest first, after `after`, at most `limit`), flip them to
 * PENDING and audit who did it. The attempt count restarts at 0 because the worker's cap (`attempts >= maxAttempts` → FAILED) reads it; the attempts
 * already made stay in event_attempts under their replay round, and `replays` numbers the new round.
 * enqueued_at is cleared: the row has no live job until the caller's requeue succeeds, and if that
 * fails (Redis down) the relay hands the row to the queue again (see docs/admin.md for when).
 */
export async function flipFailed(
  db: Database,
  where: SQL | undefined,
  by: string,
  limit: number,
  after?: ReplayPosition,
): Promise<FlippedRow[]> {
  // A keyset: the next chunk starts after the last row flipped, so a row that fails again while the
  // replay runs is not met a second time, and a chunk costs the same at any depth.
  const start =
    after === undefined
      ? sql`true`
      : sql`(received_at, id) > (${after.receivedAt}::timestamptz, ${after.id}::uuid)`
  const rows = (await db.execute(sql`
    with picked as (
      select id, attempts, last_error, received_at from inbound_events
      where status = 'failed' and ${where ?? sql`true`} and ${start}
      order by received_at, id
      limit ${limit}
      -- A row another replay holds is skipped rather than replayed twice.
      for update skip locked),
    flipped as (
      update inbound_events e
      set status = 'pending', attempts = 0, replays = e.replays + 1, last_error = null,
          next_attempt_at = null, lease_token = null, lease_until = null, processed_at = null,
          enqueued_at = null, updated_at = now()
      from picked
      where e.id = picked.id
      returning e.id, e.replays, picked.attempts as previous_attempts, picked.last_error as previous_error,
        picked.received_at),
    audited as (
      insert into event_replays (event_row_id, replay, by, previous_attempts, previous_error)
      select id, replays, ${by}, previous_attempts, previous_error from flipped)
    -- received_at as text in UTC with its microseconds: a JS Date would drop them, and the keyset
    -- would then meet the same row again.
    select id, to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as received_at
    from flipped order by received_at, id`)) as Array<{ id: string; received_at: string }>
  return rows.map((row) => ({ id: row.id, receivedAt: row.received_at }))
}
