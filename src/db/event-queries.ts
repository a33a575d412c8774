import { and, asc, desc, eq, getTableColumns, gte, lt, type SQL, sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { waitsOnDisabledRoute } from './event-routes.js'
import {
  type EventStatus,
  eventAttempts,
  eventReplays,
  inboundEventPayloads,
  inboundEvents,
} from './schema.js'

/** What a person filters the event list by; every field narrows, none is required. */
export interface EventFilter {
  source?: string | undefined
  status?: EventStatus | undefined
  /** The event type as a route filter's glob: `*` stands for any run of characters, dots included. */
  type?: string | undefined
  /** received_at at or after. */
  from?: Date | undefined
  /** received_at before. */
  to?: Date | undefined
  /** The provider's event id, exactly. */
  eventId?: string | undefined
  /** A field of the JSON body equals a value: `data.object.customer` = "cus_123". */
  payload?: PayloadMatch | undefined
  /** The event has a delivery to this route (event_routes) that is not done. */
  route?: string | undefined
}

export interface PayloadMatch {
  /** Object keys, and array indexes as digit strings: `['data', 'items', '0', 'sku']`. */
  path: string[]
  value: string | number | boolean | null
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
    filter.type === undefined ? undefined : typeCondition(filter.type),
    filter.from === undefined ? undefined : gte(inboundEvents.receivedAt, filter.from),
    filter.to === undefined ? undefined : lt(inboundEvents.receivedAt, filter.to),
    filter.eventId === undefined ? undefined : eventIdCondition(filter.eventId, filter.source),
    filter.payload === undefined ? undefined : payloadCondition(filter.payload),
    filter.route === undefined
      ? undefined
      : sql`exists (select 1 from event_routes as r where r.event_row_id = ${inboundEvents.id}
          and r.route_id = ${filter.route} and r.status <> 'done')`,
  )
}

/**
 * The type as a glob, meaning what it means in a route's filter (src/delivery/filter.ts): `*` is any
 * run of characters and nothing else is special, so LIKE's own `%`, `_` and `\` are escaped. A type
 * without `*` stays an equality, which the planner serves better than a LIKE.
 */
function typeCondition(glob: string): SQL {
  if (!glob.includes('*')) return eq(inboundEvents.eventType, glob)
  const pattern = glob
    .split('*')
    .map((part) => part.replace(/[\\%_]/g, '\\$&'))
    .join('%')
  return sql`${inboundEvents.eventType} like ${pattern} escape '\\'`
}

/**
 * An event id in any source. The unique index leads with source, and PostgreSQL 15 cannot skip
 * through it, so a bare `event_id =` reads the whole table (~600 ms on a million rows): the sources
 * are walked on that index instead (a loose index scan, one probe per source) and each is probed
 * for the id (~0.5 ms). With a source given, the source condition alone serves.
 */
function eventIdCondition(eventId: string, source: string | undefined): SQL {
  const matches = eq(inboundEvents.eventId, eventId)
  if (source !== undefined) return matches
  return sql`${matches} and ${inboundEvents.source} in (
    with recursive sources as (
      (select known.source from inbound_events as known order by known.source limit 1)
      union all
      select (select known.source from inbound_events as known
              where known.source > sources.source order by known.source limit 1)
      from sources where sources.source is not null)
    select sources.source from sources where sources.source is not null)`
}

/** A body field equals a value (bodyMatches), served by the GIN index of inbound_event_payloads. */
function payloadCondition(match: PayloadMatch): SQL {
  // Spelled as the index's expression, so that the planner matches the two.
  const parsed = sql`hookledger_body_json(${inboundEventPayloads.body})`
  return sql`${inboundEvents.id} in (
    select ${inboundEventPayloads.eventRowId} from ${inboundEventPayloads} where ${bodyMatches(parsed, match)})`
}

/**
 * payloadCondition for one row, its body read by primary key and parsed: a scalar subquery, which
 * the body index cannot serve, so that a walk over the newest events stays a walk (listEvents).
 */
function payloadOfRowMatches(match: PayloadMatch): SQL {
  const parsed = sql`(select hookledger_body_json(p.body) from inbound_event_payloads p
    where p.event_row_id = ${inboundEvents.id})`
  return bodyMatches(parsed, match)
}

/**
 * The parsed body holds the match's value at its path: containment (`@>`, which the index serves)
 * finds the candidates, the path read (`#>`) then keeps exact matches only (containment would also
 * accept an array holding the value, or any element for an index).
 */
function bodyMatches(parsed: SQL, match: PayloadMatch): SQL {
  let document: unknown = match.value
  for (const key of [...match.path].reverse()) document = /^\d+$/.test(key) ? [document] : { [key]: document }
  const path = sql.join(
    match.path.map((key) => sql`${key}::text`),
    sql`, `,
  )
  return sql`${parsed} @> ${JSON.stringify(document)}::jsonb and ${parsed} #> array[${path}] = ${JSON.stringify(match.value)}::jsonb`
}

export type EventSummary = Awaited<ReturnType<typeof listEvents>>['events'][number]

/**
 * The newest events a payload search reads one by one (their bodies parsed in turn) before it asks
 * the body index instead. The planner cannot tell how many bodies a containment matches (it assumes
 * 0.1 %), so it always takes the index, whose every candidate is parsed again to recheck it: 4.1 s
 * for the first page of a search matching a quarter of a million events, 44 ms this way. A search
 * matching few events reads these bodies for nothing (~30 ms), then the index (docs/admin.md).
 */
const PAYLOAD_WALK_ROWS = 2000

/**
 * One page of events, newest first. Keyset paging on (received_at, id): a page costs the same at
 * any depth, and rows arriving meanwhile neither shift nor repeat what the reader sees next. A
 * payload search first reads the newest PAYLOAD_WALK_ROWS of the other filters' events: a page found
 * among them is the page, since they are the newest; otherwise the body index answers.
 */
export async function listEvents(
  db: Database,
  filter: EventFilter,
  page: { after?: EventCursor | undefined; limit: number },
) {
  const after = page.after
  // A row comparison, which an index on (received_at, id) serves directly (an OR of two ranges may not).
  const cursor =
    after === undefined
      ? undefined
      : sql`(${inboundEvents.receivedAt}, ${inboundEvents.id}) < (${after.receivedAt.toISOString()}::timestamptz, ${after.id}::uuid)`
  const pageOf = (conditions: SQL | undefined) =>
    db
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
        origin: inboundEvents.origin,
        // PENDING with 0 attempts looks like a fresh event; one whose route a destination disabled
        // (410 Gone) waits for a person to re-enable it, and the list must say so.
        paused: waitsOnDisabledRoute(sql`${inboundEvents.id}`, sql`${inboundEvents.source}`),
      })
      .from(inboundEvents)
      .where(and(conditions, cursor))
      .orderBy(desc(inboundEvents.receivedAt), desc(inboundEvents.id))
      // One row more than shown tells whether a next page exists without a count(*).
      .limit(page.limit + 1)
  let rows: Awaited<ReturnType<typeof pageOf>> | undefined
  if (filter.payload !== undefined) {
    const others = and(eventFilterConditions({ ...filter, payload: undefined }), cursor)
    const walked = await pageOf(
      and(
        sql`${inboundEvents.id} in (select ${inboundEvents.id} from ${inboundEvents} where ${others ?? sql`true`}
          order by ${inboundEvents.receivedAt} desc, ${inboundEvents.id} desc limit ${PAYLOAD_WALK_ROWS})`,
        payloadOfRowMatches(filter.payload),
      ),
    )
    if (walked.length > page.limit) rows = walked
  }
  rows ??= await pageOf(eventFilterConditions(filter))
  const events = rows.slice(0, page.limit)
  const last = events.at(-1)
  const next =
    rows.length > page.limit && last !== undefined ? { receivedAt: last.receivedAt, id: last.id } : undefined
  return { events, next }
}

/** One event with everything a person needs to judge it: the row, its attempts and its replays. */
export async function findEvent(db: Database, id: string) {
  const [event] = await db
    .select({
      ...getTableColumns(inboundEvents),
      body: inboundEventPayloads.body,
      // As in the list: whether it waits behind a route a 410 Gone disabled (shown for PENDING).
      paused: waitsOnDisabledRoute(sql`${inboundEvents.id}`, sql`${inboundEvents.source}`),
    })
    .from(inboundEvents)
    .innerJoin(inboundEventPayloads, eq(inboundEventPayloads.eventRowId, inboundEvents.id))
    .where(eq(inboundEvents.id, id))
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
