import type postgres from 'postgres'

// The alert conditions the ledger answers, each served by a status index (inbound_events
// (status, received_at), operations (status, updated_at), approvals (status, created_at)).

/** Per source, the events that ended FAILED within the last `windowMs`. */
export async function failedEventsBySource(client: postgres.Sql, windowMs: number) {
  return client<Array<{ source: string; n: number; last_error: string | null }>>`
    select source, count(*)::int as n, (array_agg(last_error order by updated_at desc))[1] as last_error
    from inbound_events
    where status = 'failed' and updated_at > now() - ${windowMs} * interval '1 millisecond'
    group by source order by source`
}

/** Operations waiting in needs_reconciliation for longer than `olderThanMs`. */
export async function staleReconciliations(client: postgres.Sql, olderThanMs: number) {
  const [row] = await client<Array<{ n: number; oldest_key: string | null }>>`
    select count(*)::int as n, (array_agg(operation_key order by updated_at))[1] as oldest_key
    from operations
    where status = 'needs_reconciliation' and updated_at <= now() - ${olderThanMs} * interval '1 millisecond'`
  return { count: row?.n ?? 0, oldestKey: row?.oldest_key ?? null }
}

/** Approvals no person decided for longer than `olderThanMs`. */
export async function staleApprovals(client: postgres.Sql, olderThanMs: number) {
  const [row] = await client<Array<{ n: number }>>`
    select count(*)::int as n from approvals
    where status = 'pending' and created_at <= now() - ${olderThanMs} * interval '1 millisecond'`
  return row?.n ?? 0
}

/** How many events are PENDING, and how long the oldest of them has waited. */
export async function pendingBacklog(client: postgres.Sql) {
  const [row] = await client<Array<{ n: number; oldest_ms: number | null }>>`
    select count(*)::int as n, (extract(epoch from now() - min(received_at)) * 1000)::float8 as oldest_ms
    from inbound_events where status = 'pending'`
  return { count: row?.n ?? 0, oldestMs: row?.oldest_ms ?? 0 }
}

/**
 * PENDING rows committed more than `graceMs` ago known to have no job in the queue: never taken, or
 * found lost by the relay's orphan pass (markUnqueued) and not taken back yet.
 */
export async function unqueuedEvents(client: postgres.Sql, graceMs: number): Promise<number> {
  // inbound_events_unqueued_idx holds exactly these rows, so this costs what the gap is, not the ledger.
  const [row] = await client<Array<{ n: number }>>`
    select count(*)::int as n from inbound_events
    where status = 'pending' and enqueued_at is null
      and received_at < now() - ${graceMs} * interval '1 millisecond'`
  return row?.n ?? 0
}

/**
 * The unfinished events (PENDING or PROCESSING), counted up to `bound` and no further, so a huge
 * backlog costs no more than the bound; with the snapshot the count saw (pg_current_snapshot as
 * text), which tells which transactions' rows it included.
 */
export async function unfinishedUpTo(
  client: postgres.Sql,
  bound: number,
): Promise<{ count: number; snapshot: string }> {
  // An aggregate without `group by`: always exactly one row.
  const [row] = await client<[{ n: number; snapshot: string }]>`
    select count(*)::int as n, pg_current_snapshot()::text as snapshot from (select 1 from inbound_events
      where status in ('pending', 'processing') limit ${bound}) backlog`
  return { count: row.n, snapshot: row.snapshot }
}

/** Whether at least `bound` events are unfinished (PENDING or PROCESSING); stops counting at the bound. */
export async function unfinishedAtLeast(client: postgres.Sql, bound: number): Promise<boolean> {
  return (await unfinishedUpTo(client, bound)).count >= bound
}

/**
 * The errors a backfill pass meets again at every pass until a person acts: the sweep cannot move
 * past its cursor. Transient ones (rate limits, an unavailable provider) are not among them.
 */
export const STUCK_BACKFILL_CODES = ['stuck_cursor', 'response_too_large'] as const

/** Sources whose last backfill pass, within the last `windowMs`, stopped on a stuck error. */
export async function stuckBackfills(client: postgres.Sql, windowMs: number) {
  return client<Array<{ source: string; last_error_code: string; last_error: string | null }>>`
    select source, last_error_code, last_error from backfill_cursors
    where last_error_code = any(${[...STUCK_BACKFILL_CODES]}::text[])
      and last_pass_at > now() - ${windowMs} * interval '1 millisecond'
    order by source`
}
