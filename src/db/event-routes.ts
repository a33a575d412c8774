import { asc, eq, type SQL, sql } from 'drizzle-orm'
import type postgres from 'postgres'
import type { Database, Transaction } from './client.js'
import { eventRoutes, type RouteDeliveryStatus } from './schema.js'

/**
 * The route id of a source's own forward (`handler: { type: 'forward' }`): its destination is
 * `<source>/forward` on /metrics, in alerts and on /admin/routes, and `hookledger routes enable
 * <source> forward` re-enables it after a 410 Gone.
 */
export const SOURCE_FORWARD_ROUTE = 'forward'

/**
 * Whether an event waits behind a route a 410 Gone disabled (for a PENDING event: the admin list's
 * and overview's `paused`): its row for a route is paused, or its source's own forward, which keeps
 * no route rows, is disabled. `id` and `source` are the event row's columns in the caller's query.
 */
export function waitsOnDisabledRoute(id: SQL, source: SQL): SQL<boolean> {
  return sql<boolean>`(exists (select 1 from event_routes r where r.event_row_id = ${id} and r.status = 'paused')
    or (exists (select 1 from disabled_routes d where d.source = ${source} and d.route_id = ${SOURCE_FORWARD_ROUTE})
        and not exists (select 1 from event_routes r where r.event_row_id = ${id})))`
}

/** What one attempt at one route came to, as the admin page shows it. */
export interface RouteOutcome {
  routeId: string
  status: Exclude<RouteDeliveryStatus, 'pending'>
  /** The route's destination or handler ran (a delivery that only waited did not). */
  ran: boolean
  error?: string | undefined
  responseStatus?: number | undefined
}

export interface RouteStates {
  /** This event's routes that are done: a retry or a replay runs only the others. */
  done: ReadonlySet<string>
  /** The source's routes a 410 Gone disabled, with why. */
  disabled: ReadonlyMap<string, string>
}

/** One statement before an attempt: which routes are done for the event, which are disabled. */
export async function readRouteStates(
  client: postgres.Sql,
  eventRowId: string,
  source: string,
): Promise<RouteStates> {
  const rows = await client<Array<{ kind: 'done' | 'disabled'; route_id: string; reason: string | null }>>`
    select 'done' as kind, route_id, null as reason from event_routes
    where event_row_id = ${eventRowId} and status = 'done'
    union all
    select 'disabled', route_id, reason from disabled_routes where source = ${source}`
  return {
    done: new Set(rows.filter((row) => row.kind === 'done').map((row) => row.route_id)),
    disabled: new Map(
      rows.filter((row) => row.kind === 'disabled').map((row) => [row.route_id, row.reason ?? 'disabled']),
    ),
  }
}

/** Disables a route; true when this call did it (so one alert goes out, not one per delivery). */
export async function disableRoute(
  client: postgres.Sql,
  source: string,
  routeId: string,
  reason: string,
): Promise<boolean> {
  const rows = await client`
    insert into disabled_routes (source, route_id, reason) values (${source}, ${routeId}, ${reason})
    on conflict do nothing returning route_id`
  return rows.length === 1
}

/**
 * Re-enables a route and, in the same transaction, makes its paused deliveries due now: their job
 * marks are cleared, so the relay's next pass (`relay.intervalMs`) hands them to the queue at once
 * instead of their recheck (`delivery.pausedRecheckMs`) later. A route's paused deliveries are the
 * PENDING events with a `paused` row for it; a source's own forward keeps no route rows, so for
 * `forward` they are the source's PENDING events without route rows whose retry is still to come.
 * A row locked at that moment (being leased) is skipped and waits for its recheck. Undefined when
 * the route was not disabled; else how many deliveries were resumed.
 */
export async function enableRoute(
  client: postgres.Sql,
  source: string,
  routeId: string,
): Promise<{ resumed: number } | undefined> {
  const [row] = await client<Array<{ enabled: number; resumed: number }>>`
    with enabled as (
      delete from disabled_routes where source = ${source} and route_id = ${routeId} returning route_id),
    paused as (
      select e.id from inbound_events e
      where exists (select 1 from enabled)
        and e.source = ${source} and e.status = 'pending' and e.next_attempt_at > now()
        and (exists (select 1 from event_routes r
                     where r.event_row_id = e.id and r.route_id = ${routeId} and r.status = 'paused')
             or (${routeId} = ${SOURCE_FORWARD_ROUTE}
                 and not exists (select 1 from event_routes r where r.event_row_id = e.id)))
      for update of e skip locked),
    resumed as (
      update inbound_events e set enqueued_at = null, next_attempt_at = null, updated_at = now()
      from paused where e.id = paused.id
      returning e.id)
    select (select count(*) from enabled)::int as enabled, (select count(*) from resumed)::int as resumed`
  return row === undefined || row.enabled === 0 ? undefined : { resumed: row.resumed }
}

/** What re-enabling a route did to its paused deliveries, as the CLI and the admin page say it. */
export function resumedText(resumed: number): string {
  if (resumed === 0) return 'no paused deliveries were waiting'
  return `${resumed} paused ${resumed === 1 ? 'delivery goes' : 'deliveries go'} out now`
}

export interface DisabledRoute {
  source: string
  routeId: string
  reason: string
  disabledAt: Date
}

/** Every disabled route, by source and route: the admin page, the CLI and the alert check. */
export async function listDisabledRoutes(client: postgres.Sql): Promise<DisabledRoute[]> {
  const rows = await client<
    Array<{ source: string; route_id: string; reason: string; disabled_at: string | Date }>
  >`
    select source, route_id, reason, disabled_at from disabled_routes order by source, route_id`
  // A pool drizzle also runs on hands timestamps over as text.
  return rows.map((row) => ({
    source: row.source,
    routeId: row.route_id,
    reason: row.reason,
    disabledAt: new Date(row.disabled_at),
  }))
}

/**
 * Records one attempt's outcome of every route it tried, in one statement. A route already done stays
 * done: a code route marks itself done in its own transaction, and a worker whose lease ran out must
 * not write an older status over that.
 */
export async function recordRouteOutcomes(
  client: postgres.Sql,
  eventRowId: string,
  outcomes: readonly RouteOutcome[],
): Promise<void> {
  if (outcomes.length === 0) return
  await client`
    insert into event_routes as r (event_row_id, route_id, status, attempts, last_error, response_status)
    select ${eventRowId}::uuid, route_id, status::route_delivery_status, ran::int, error, response_status::int
    -- Each array behind a subquery, so one plan serves every batch size (see claimStatement).
    from unnest(
      (select ${outcomes.map((o) => o.routeId)}::text[]), (select ${outcomes.map((o) => o.status)}::text[]),
      (select ${outcomes.map((o) => (o.ran ? '1' : '0'))}::text[]),
      (select ${outcomes.map((o) => o.error?.slice(0, 2000) ?? null)}::text[]),
      (select ${outcomes.map((o) => (o.responseStatus === undefined ? null : String(o.responseStatus)))}::text[])
    ) as i(route_id, status, ran, error, response_status)
    on conflict (event_row_id, route_id) do update
    set status = excluded.status, attempts = r.attempts + excluded.attempts,
        last_error = excluded.last_error,
        response_status = coalesce(excluded.response_status, r.response_status), updated_at = now()
    where r.status <> 'done'`
}

/**
 * Takes a code route's row for this event inside the transaction that will mark it done: a second
 * worker running the same route waits here until the first commits, then sees it done. Answers the
 * route's status before this attempt.
 */
export async function lockEventRoute(
  tx: Transaction,
  eventRowId: string,
  routeId: string,
): Promise<RouteDeliveryStatus> {
  await tx.execute(sql`
    insert into event_routes (event_row_id, route_id, status) values (${eventRowId}, ${routeId}, 'pending')
    on conflict do nothing`)
  const [row] = (await tx.execute(sql`
    select status from event_routes where event_row_id = ${eventRowId} and route_id = ${routeId}
    for update`)) as unknown as Array<{ status: RouteDeliveryStatus }>
  if (row === undefined) throw new Error(`event route ${eventRowId}/${routeId} vanished under its lock`)
  return row.status
}

/** Marks a code route done in its handler's transaction, so its writes and the mark commit together. */
export async function markEventRouteDone(
  tx: Transaction,
  eventRowId: string,
  routeId: string,
  responseStatus: number | undefined,
): Promise<void> {
  await tx.execute(sql`
    update event_routes
    set status = 'done', attempts = attempts + 1, last_error = null,
        response_status = ${responseStatus ?? null}, updated_at = now()
    where event_row_id = ${eventRowId} and route_id = ${routeId}`)
}

export type EventRouteRow = typeof eventRoutes.$inferSelect

/** Every route the event matched, for its admin page. */
export function listEventRoutes(db: Database, eventRowId: string): Promise<EventRouteRow[]> {
  return db
    .select()
    .from(eventRoutes)
    .where(eq(eventRoutes.eventRowId, eventRowId))
    .orderBy(asc(eventRoutes.routeId))
}
