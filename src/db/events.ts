import { and, eq, inArray, isNull, lt, or, sql } from 'drizzle-orm'
import type { Database, Transaction } from './client.js'
import { type EventStatus, eventAttempts, inboundConflicts, inboundEvents } from './schema.js'

export interface NewEvent {
  source: string
  eventId: string
  eventType: string | null
  payloadHash: string
  body: Buffer
  headers: Record<string, string>
}

export type ClaimResult =
  | { kind: 'accepted'; id: string }
  | { kind: 'duplicate'; id: string }
  | { kind: 'conflict'; id: string }

/**
 * The claim: one INSERT on the unique (source, event_id) index, committed on its own. Concurrent
 * deliveries of one event wait on that index, so exactly one of them is `accepted`; no prior SELECT
 * can race. A loser then reads the winner's hash to tell a retry from a conflicting reuse of the id.
 */
export async function claimEvent(db: Database, event: NewEvent): Promise<ClaimResult> {
  for (;;) {
    const inserted = await db
      .insert(inboundEvents)
      .values(event)
      .onConflictDoNothing({ target: [inboundEvents.source, inboundEvents.eventId] })
      .returning({ id: inboundEvents.id })
    if (inserted[0] !== undefined) return { kind: 'accepted', id: inserted[0].id }
    const [existing] = await db
      .select({ id: inboundEvents.id, payloadHash: inboundEvents.payloadHash })
      .from(inboundEvents)
      .where(and(eq(inboundEvents.source, event.source), eq(inboundEvents.eventId, event.eventId)))
    // Gone between the two statements (retention deleted it): claim again.
    if (existing === undefined) continue
    if (existing.payloadHash === event.payloadHash) return { kind: 'duplicate', id: existing.id }
    await db.insert(inboundConflicts).values({
      source: event.source,
      eventId: event.eventId,
      payloadHash: event.payloadHash,
      originalPayloadHash: existing.payloadHash,
    })
    return { kind: 'conflict', id: existing.id }
  }
}

/** Records that jobs for these rows are in the queue, so the relay leaves them alone. */
export async function markEnqueued(db: Database, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return
  await db
    .update(inboundEvents)
    .set({ enqueuedAt: sql`now()` })
    .where(and(inArray(inboundEvents.id, [...ids]), isNull(inboundEvents.enqueuedAt)))
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
