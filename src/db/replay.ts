import { eq, type SQL, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { type EventFilter, eventFilterConditions } from './event-queries.js'
import { type EventStatus, inboundEvents } from './schema.js'

/** The most events one bulk replay flips; a person clicks again for the next batch. */
export const BULK_REPLAY_LIMIT = 1000

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
  if (flipped !== undefined) return { kind: 'replayed', id: flipped }
  const [current] = await db
    .select({ status: inboundEvents.status })
    .from(inboundEvents)
    .where(eq(inboundEvents.id, id))
  return current === undefined ? { kind: 'not_found' } : { kind: 'not_failed', status: current.status }
}

/** Replays the FAILED events matching `filter`, oldest first, at most `limit`; returns their ids. */
export async function replayFailedEvents(
  db: Database,
  filter: EventFilter,
  by: string,
  limit = BULK_REPLAY_LIMIT,
): Promise<string[]> {
  return flipFailed(db, eventFilterConditions({ ...filter, status: 'failed' }), by, limit)
}

/**
 * One statement: lock the FAILED rows, flip them to PENDING and audit who did it. The attempt count
 * restarts at 0 because the worker's cap (`attempts >= maxAttempts` → FAILED) reads it; the attempts
 * already made stay in event_attempts under their replay round, and `replays` numbers the new round.
 * enqueued_at is cleared: the row has no live job until the caller's requeue succeeds, and if that
 * fails (Redis down) the relay hands the row to the queue again (see docs/admin.md for when).
 */
async function flipFailed(
  db: Database,
  where: SQL | undefined,
  by: string,
  limit: number,
): Promise<string[]> {
  const rows = (await db.execute(sql`
    with picked as (
      select id, attempts, last_error from inbound_events
      where status = 'failed' and ${where ?? sql`true`}
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
      returning e.id, e.replays, picked.attempts as previous_attempts, picked.last_error as previous_error),
    audited as (
      insert into event_replays (event_row_id, replay, by, previous_attempts, previous_error)
      select id, replays, ${by}, previous_attempts, previous_error from flipped)
    select id from flipped`)) as Array<{ id: string }>
  return rows.map((row) => row.id)
}
