import { and, asc, inArray, isNull, lt, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { inboundEvents } from './schema.js'

// The relay's reads of the ledger (src/queue/relay.ts): each a chunk of rows in (received_at, id)
// order, strictly after a cursor, so a pass walks a backlog of any size in bounded steps.

/** Where a pass has got to in the ledger's (received_at, id) order. */
export interface RelayCursor {
  /** As Postgres prints it: a JS Date would drop its microseconds. */
  receivedAt: string
  id: string
}

function after(cursor: RelayCursor | undefined) {
  return cursor === undefined
    ? undefined
    : sql`(${inboundEvents.receivedAt}, ${inboundEvents.id}) > (${cursor.receivedAt}::timestamptz, ${cursor.id}::uuid)`
}

const ago = (ms: number) => sql`now() - ${`${ms} milliseconds`}::interval`

/**
 * PENDING rows committed more than `graceMs` ago whose job was never confirmed in the queue, or whose
 * job mark was cleared since (a replay, a route re-enabled): those have the job they had recorded.
 */
export async function unqueuedEventsAfter(
  db: Database,
  options: { graceMs: number; after: RelayCursor | undefined; limit: number },
): Promise<Array<RelayCursor & { jobId: string | null }>> {
  return db
    .select({
      id: inboundEvents.id,
      receivedAt: sql<string>`${inboundEvents.receivedAt}::text`,
      jobId: inboundEvents.jobId,
    })
    .from(inboundEvents)
    .where(
      and(
        sql`${inboundEvents.status} = 'pending'`,
        isNull(inboundEvents.enqueuedAt),
        lt(inboundEvents.receivedAt, ago(options.graceMs)),
        after(options.after),
      ),
    )
    .orderBy(asc(inboundEvents.receivedAt), asc(inboundEvents.id))
    .limit(options.limit)
}

/**
 * The next chunk of rows quiet for `quietMs` (no retry due, no live lease, nothing changed), marked
 * checked in the same statement (updated_at now: looked at again only after another quiet period),
 * skipping rows another relay or a worker holds locked.
 */
export async function claimQuietEvents(
  db: Database,
  options: { quietMs: number; after: RelayCursor | undefined; limit: number },
): Promise<Array<RelayCursor & { jobId: string | null }>> {
  const rows = await db.execute<{ id: string; job_id: string | null; received_at: string }>(sql`
    with quiet as (
      select ${inboundEvents.id} as id from ${inboundEvents}
      where ${inboundEvents.status} in ('pending', 'processing')
        and ${inboundEvents.enqueuedAt} is not null
        -- greatest() skips nulls: quiet means no retry is due, no lease is live, nothing changed lately.
        and greatest(${inboundEvents.nextAttemptAt}, ${inboundEvents.leaseUntil}, ${inboundEvents.updatedAt}) < ${ago(options.quietMs)}
        and ${after(options.after) ?? sql`true`}
      order by ${inboundEvents.receivedAt}, ${inboundEvents.id}
      limit ${options.limit}
      for update skip locked),
    checked as (
      update ${inboundEvents} e set updated_at = now() from quiet where e.id = quiet.id
      returning e.id, e.job_id, e.received_at)
    select id, job_id, received_at::text as received_at from checked order by received_at, id`)
  return [...rows].map((row) => ({ id: row.id, jobId: row.job_id, receivedAt: row.received_at }))
}

/** Marks rows quiet for `quietMs` already, so the next look for quiet rows finds them again. */
export async function markQuiet(db: Database, ids: readonly string[], quietMs: number): Promise<void> {
  await db
    .update(inboundEvents)
    .set({ updatedAt: ago(quietMs) })
    .where(inArray(inboundEvents.id, [...ids]))
}

/**
 * The next chunk of rows still owed work (PENDING or PROCESSING), each with how long its retry is
 * still away (0 when none is due later).
 */
export async function unfinishedEventsAfter(
  db: Database,
  options: { after: RelayCursor | undefined; limit: number },
): Promise<Array<RelayCursor & { delayMs: number }>> {
  return db
    .select({
      id: inboundEvents.id,
      receivedAt: sql<string>`${inboundEvents.receivedAt}::text`,
      delayMs: sql<number>`case when ${inboundEvents.status} = 'pending' and ${inboundEvents.nextAttemptAt} > now()
        then ceil(extract(epoch from ${inboundEvents.nextAttemptAt} - now()) * 1000)::int else 0 end`,
    })
    .from(inboundEvents)
    .where(and(inArray(inboundEvents.status, ['pending', 'processing']), after(options.after)))
    .orderBy(asc(inboundEvents.receivedAt), asc(inboundEvents.id))
    .limit(options.limit)
}
