import { and, asc, desc, eq, gte, lt, type SQL, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { type EventStatus, eventAttempts, eventReplays, inboundEvents } from './schema.js'

/** What a person filters the event list by; every field narrows, none is required. */
export interface EventFilter {
  source?: string | undefined
  status?: EventStatus | undefined
  type?: string | undefined
  /** received_at at or after. */
  from?: Date | undefined
  /** received_at before. */
  to?: Date | undefined
}

/** The last row of a page: the next page starts strictly after it in (received_at desc, id desc). */
export interface EventCursor {
  receivedAt: Date
  id: string
}

/** The filter as SQL conditions, shared by the list and the bulk replay so both mean the same rows. */
export function eventFilterConditions(filter: EventFilter): SQL | undefined {
  return and(
    filter.source === undefined ? undefined : eq(inboundEvents.source, filter.source),
    filter.status === undefined ? undefined : eq(inboundEvents.status, filter.status),
    filter.type === undefined ? undefined : eq(inboundEvents.eventType, filter.type),
    filter.from === undefined ? undefined : gte(inboundEvents.receivedAt, filter.from),
    filter.to === undefined ? undefined : lt(inboundEvents.receivedAt, filter.to),
  )
}

export type EventSummary = Awaited<ReturnType<typeof listEvents>>['events'][number]

/**
 * One page of events, newest first. Keyset paging on (received_at, id): a page costs the same at
 * any depth, and rows arriving meanwhile neither shift nor repeat what the reader sees next.
 */
export async function listEvents(
  db: Database,
  filter: EventFilter,
  page: { after?: EventCursor | undefined; limit: number },
) {
  const after = page.after
  const rows = await db
    .select({
      id: inboundEvents.id,
      source: inboundEvents.source,
      eventId: inboundEvents.eventId,
      eventType: inboundEvents.eventType,
      status: inboundEvents.status,
      attempts: inboundEvents.attempts,
      replays: inboundEvents.replays,
      lastError: inboundEvents.lastError,
      receivedAt: inboundEvents.receivedAt,
      processedAt: inboundEvents.processedAt,
    })
    .from(inboundEvents)
    .where(
      and(
        eventFilterConditions(filter),
        // A row comparison, which an index on (received_at, id) serves directly (an OR of two ranges may not).
        after === undefined
          ? undefined
          : sql`(${inboundEvents.receivedAt}, ${inboundEvents.id}) < (${after.receivedAt.toISOString()}::timestamptz, ${after.id}::uuid)`,
      ),
    )
    .orderBy(desc(inboundEvents.receivedAt), desc(inboundEvents.id))
    // One row more than shown tells whether a next page exists without a count(*).
    .limit(page.limit + 1)
  const events = rows.slice(0, page.limit)
  const last = events.at(-1)
  const next =
    rows.length > page.limit && last !== undefined ? { receivedAt: last.receivedAt, id: last.id } : undefined
  return { events, next }
}

/** One event with everything a person needs to judge it: the row, its attempts and its replays. */
export async function findEvent(db: Database, id: string) {
  const [event] = await db.select().from(inboundEvents).where(eq(inboundEvents.id, id))
  if (event === undefined) return undefined
  const attempts = await db
    .select()
    .from(eventAttempts)
    .where(eq(eventAttempts.eventRowId, id))
    .orderBy(asc(eventAttempts.replay), asc(eventAttempts.attempt), asc(eventAttempts.id))
  const replays = await db
    .select()
    .from(eventReplays)
    .where(eq(eventReplays.eventRowId, id))
    .orderBy(asc(eventReplays.replay))
  return { event, attempts, replays }
}

export type EventDetail = NonNullable<Awaited<ReturnType<typeof findEvent>>>
