import { sql } from 'drizzle-orm'
import type { Database } from './client.js'
import { waitsOnDisabledRoute } from './event-routes.js'
import type { EventStatus } from './schema.js'

/** The overview's spans: per-minute buckets for the hour, 15-minute ones for the day. */
export const OVERVIEW_WINDOWS = {
  hour: { spanMs: 3600_000, bucketMs: 60_000 },
  day: { spanMs: 86_400_000, bucketMs: 900_000 },
} as const
export type OverviewWindow = keyof typeof OVERVIEW_WINDOWS

export interface SourceStats {
  /** undefined: all sources together. */
  source: string | undefined
  received: number
  failed: number
  /** PENDING or PROCESSING now, but for the paused ones. */
  inFlight: number
  /** PENDING behind a route a destination disabled (410 Gone): they wait for a person, not a worker. */
  paused: number
  /** Receipt to DONE/FAILED, in milliseconds, of the events processed; undefined when none was. */
  p50Ms: number | undefined
  p99Ms: number | undefined
}

export interface Overview {
  from: Date
  to: Date
  bucketMs: number
  /** Deliveries received per bucket, by source and current status. */
  buckets: Array<{ source: string; status: EventStatus; at: Date; count: number }>
  /** Per source, then one row for all of them (source undefined). */
  stats: SourceStats[]
  /** Operations awaiting a person's decision, by the source in their key (`<source>:<event>:<step>`). */
  awaitingApproval: Array<{ keySource: string; count: number }>
}

/**
 * The overview of the last hour or day, in three statements. Each reads only the window's rows
 * through the received_at index (see bench/admin-search for the figures on a million-row ledger).
 */
export async function readOverview(
  db: Database,
  window: OverviewWindow,
  source: string | undefined,
  now = new Date(),
): Promise<Overview> {
  const { spanMs, bucketMs } = OVERVIEW_WINDOWS[window]
  // The window ends at the end of the current bucket, so buckets line up with the clock.
  const to = new Date(Math.ceil(now.getTime() / bucketMs) * bucketMs)
  const from = new Date(to.getTime() - spanMs)
  const where = sql`received_at >= ${from.toISOString()}::timestamptz and received_at < ${to.toISOString()}::timestamptz
    ${source === undefined ? sql`` : sql`and source = ${source}`}`
  const buckets = await db.execute<{ source: string; status: EventStatus; at: Date; count: number }>(sql`
    select source, status,
      date_bin(${`${bucketMs / 1000} seconds`}::interval, received_at, ${from.toISOString()}::timestamptz) as at,
      count(*)::int as count
    from inbound_events where ${where}
    group by 1, 2, 3`)
  const stats = await db.execute<{
    source: string | null
    received: number
    failed: number
    in_flight: number
    paused: number
    p50: number | null
    p99: number | null
  }>(sql`
    select source, count(*)::int as received,
      count(*) filter (where status = 'failed')::int as failed,
      count(*) filter (where status in ('pending', 'processing') and not paused)::int as in_flight,
      count(*) filter (where status = 'pending' and paused)::int as paused,
      percentile_cont(0.5) within group (order by extract(epoch from processed_at - received_at) * 1000)
        filter (where processed_at is not null) as p50,
      percentile_cont(0.99) within group (order by extract(epoch from processed_at - received_at) * 1000)
        filter (where processed_at is not null) as p99
    from (
      select *, status = 'pending' and ${waitsOnDisabledRoute(sql`inbound_events.id`, sql`inbound_events.source`)} as paused
      from inbound_events where ${where}
    ) as events
    group by grouping sets ((source), ())
    order by source nulls last`)
  // Small: only the operations waiting for a person, found by the (status, updated_at) index.
  const awaiting = await db.execute<{ key_source: string; count: number }>(sql`
    select split_part(operation_key, ':', 1) as key_source, count(*)::int as count
    from operations where status = 'awaiting_approval' group by 1 order by 1`)
  return {
    from,
    to,
    bucketMs,
    buckets: [...buckets].map((row) => ({ ...row, at: new Date(row.at) })),
    stats: [...stats].map((row) => ({
      source: row.source ?? undefined,
      received: row.received,
      failed: row.failed,
      inFlight: row.in_flight,
      paused: row.paused,
      p50Ms: row.p50 === null ? undefined : Number(row.p50),
      p99Ms: row.p99 === null ? undefined : Number(row.p99),
    })),
    awaitingApproval: [...awaiting].map((row) => ({ keySource: row.key_source, count: row.count })),
  }
}
