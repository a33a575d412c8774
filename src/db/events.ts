import { and, eq, lt, or, sql } from 'drizzle-orm'
import type postgres from 'postgres'
import type { Database, Transaction } from './client.js'
import { type EventStatus, eventAttempts, inboundEvents } from './schema.js'

/** Records that jobs for these rows are in the queue, so the relay leaves them alone. */
export async function markEnqueued(client: postgres.Sql, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return
  await client`update inbound_events set enqueued_at = now() where id = any(${ids}::uuid[]) and enqueued_at is null`
}

export type LeaseResult =
  | { kind: 'leased'; row: typeof inboundEvents.$inferSelect }
  | { kind: 'finished'; status: EventStatus }
  | { kind: 'held'; until: Date }
  | { kind: 'missing' }

/**
 * Takes the row for one attempt: counts the attempt and sets a lease, committed before the handler
 * runs, so a crash inside the handler is still counted and the next worker can take over once the
 * lease expires.
 */
export async function leaseEvent(
  db: Database,
  id: string,
  token: string,
  leaseMs: number,
): Promise<LeaseResult> {
  const [row] = await db
    .update(inboundEvents)
    .set({
      status: 'processing',
      attempts: sql`${inboundEvents.attempts} + 1`,
      leaseToken: token,
      leaseUntil: sql`now() + ${`${leaseMs} milliseconds`}::interval`,
      enqueuedAt: sql`coalesce(${inboundEvents.enqueuedAt}, now())`,
      updatedAt: sql`now()`,
    })
    .where(
      and(
        eq(inboundEvents.id, id),
        or(
          eq(inboundEvents.status, 'pending'),
          and(eq(inboundEvents.status, 'processing'), lt(inboundEvents.leaseUntil, sql`now()`)),
        ),
      ),
    )
    .returning()
  if (row !== undefined) return { kind: 'leased', row }
  const [current] = await db
    .select({ status: inboundEvents.status, leaseUntil: inboundEvents.leaseUntil })
    .from(inboundEvents)
    .where(eq(inboundEvents.id, id))
  if (current === undefined) return { kind: 'missing' }
  if (current.status === 'processing' && current.leaseUntil !== null)
    return { kind: 'held', until: current.leaseUntil }
  return { kind: 'finished', status: current.status }
}

/**
 * Locks the leased row inside the handler's transaction. While the lock is held no other worker can
 * take the row over, even after the lease runs out; false means another worker already did.
 */
export async function lockLeasedEvent(tx: Transaction, id: string, token: string): Promise<boolean> {
  const rows = await tx
    .select({ id: inboundEvents.id })
    .from(inboundEvents)
    .where(and(eq(inboundEvents.id, id), eq(inboundEvents.leaseToken, token)))
    .for('update')
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
  await tx
    .update(inboundEvents)
    .set({
      status: 'done',
      processedAt: sql`now()`,
      lastError: null,
      leaseToken: null,
      leaseUntil: null,
      nextAttemptAt: null,
      updatedAt: sql`now()`,
    })
    .where(eq(inboundEvents.id, id))
  await tx.insert(eventAttempts).values({ eventRowId: id, outcome: 'done', ...record })
}

/**
 * Records a failed attempt: back to PENDING with the next attempt's time, or FAILED once the attempts
 * are used up. Guarded by the lease token, so a worker that lost its lease cannot overwrite the row.
 */
export async function markAttemptFailed(
  db: Database,
  id: string,
  token: string,
  record: AttemptRecord & { error: string; final: boolean; retryAt: Date },
): Promise<EventStatus | undefined> {
  return db.transaction(async (tx) => {
    const [row] = await tx
      .update(inboundEvents)
      .set({
        status: record.final ? 'failed' : 'pending',
        lastError: record.error,
        nextAttemptAt: record.final ? null : record.retryAt,
        leaseToken: null,
        leaseUntil: null,
        updatedAt: sql`now()`,
      })
      .where(and(eq(inboundEvents.id, id), eq(inboundEvents.leaseToken, token)))
      .returning({ status: inboundEvents.status })
    if (row === undefined) return undefined
    await tx.insert(eventAttempts).values({
      eventRowId: id,
      outcome: 'error',
      attempt: record.attempt,
      startedAt: record.startedAt,
      error: record.error,
      responseStatus: record.responseStatus,
      responseExcerpt: record.responseExcerpt,
    })
    return row.status
  })
}
