import { randomUUID } from 'node:crypto'
import type postgres from 'postgres'
import { LeaseLostError } from './lease.js'

/** A source's backfill position, as the pass that holds its lease reads it. */
export interface BackfillCursor {
  watermark: Date | null
  /** An unfinished sweep: where it started listing from, when it began, and the provider's page cursor. */
  sweep: { since: Date; startedAt: Date; resume: string } | null
}

export interface PassLease {
  token: string
  cursor: BackfillCursor
}

// Timestamps arrive as text: drizzle turns the pool's date parsing off for the statements it runs.
interface CursorRow {
  watermark: string | null
  sweep_since: string | null
  sweep_started_at: string | null
  sweep_resume: string | null
  lease_until: string | null
}

const dateOf = (text: string | null): Date | null => (text === null ? null : new Date(text))

/**
 * Takes the source's pass lease, so one pass at a time runs across every process; undefined with
 * the holder's lease end when another pass holds it. A lease row (not an advisory lock) needs no
 * connection held for the whole pass, and a crashed pass's lease runs out by itself.
 */
export async function takePassLease(
  sql: postgres.Sql,
  source: string,
  leaseMs: number,
): Promise<PassLease | { heldUntil: Date }> {
  const token = randomUUID()
  const [taken] = await sql<CursorRow[]>`
    insert into backfill_cursors as c (source, lease_token, lease_until)
    values (${source}, ${token}, now() + ${leaseMs} * interval '1 millisecond')
    on conflict (source) do update
      set lease_token = excluded.lease_token, lease_until = excluded.lease_until, updated_at = now()
      where c.lease_until is null or c.lease_until < now()
    returning watermark, sweep_since, sweep_started_at, sweep_resume, lease_until`
  if (taken === undefined) {
    const [held] = await sql<CursorRow[]>`select lease_until from backfill_cursors where source = ${source}`
    return { heldUntil: dateOf(held?.lease_until ?? null) ?? new Date() }
  }
  const since = dateOf(taken.sweep_since)
  const startedAt = dateOf(taken.sweep_started_at)
  const sweep =
    since !== null && startedAt !== null && taken.sweep_resume !== null
      ? { since, startedAt, resume: taken.sweep_resume }
      : null
  return { token, cursor: { watermark: dateOf(taken.watermark), sweep } }
}

/**
 * Records that a sweep's pages up to `resume` were handled (their events claimed or their
 * redeliveries asked for) and extends the lease: a pass that stops after this resumes after it.
 * With no sweep (a one-off pass from `--since`), only the lease is extended.
 */
export async function saveSweepProgress(
  sql: postgres.Sql,
  source: string,
  token: string,
  sweep: { since: Date; startedAt: Date; resume: string } | null,
  leaseMs: number,
): Promise<void> {
  const updated =
    sweep === null
      ? await sql`
          update backfill_cursors
          set lease_until = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
          where source = ${source} and lease_token = ${token}`
      : await sql`
          update backfill_cursors
          set sweep_since = ${sweep.since.toISOString()}::timestamptz,
              sweep_started_at = ${sweep.startedAt.toISOString()}::timestamptz, sweep_resume = ${sweep.resume},
              lease_until = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
          where source = ${source} and lease_token = ${token}`
  if (updated.count === 0) throw new LeaseLostError(`the backfill cursor of source '${source}'`)
}

/** A sweep reached its lower bound: everything created before `watermark` has been listed. */
export async function completeSweep(
  sql: postgres.Sql,
  source: string,
  token: string,
  watermark: Date,
): Promise<void> {
  const updated = await sql`
    update backfill_cursors
    set watermark = greatest(watermark, ${watermark.toISOString()}::timestamptz), sweep_since = null, sweep_started_at = null,
        sweep_resume = null, updated_at = now()
    where source = ${source} and lease_token = ${token}`
  if (updated.count === 0) throw new LeaseLostError(`the backfill cursor of source '${source}'`)
}

/**
 * Drops an unfinished sweep whose page cursor the provider no longer takes (Stripe's event aged out
 * of its 30 days, GitHub's cursor expired, the hook changed): the next pass starts the sweep again.
 */
export async function dropSweep(sql: postgres.Sql, source: string, token: string): Promise<void> {
  await sql`
    update backfill_cursors
    set sweep_since = null, sweep_started_at = null, sweep_resume = null, updated_at = now()
    where source = ${source} and lease_token = ${token}`
}

/**
 * Ends a pass: frees the lease and records when it ran and how it ended (the error's code is what
 * the backfillStuck alert reads; null for an unexpected fault).
 */
export async function releasePassLease(
  sql: postgres.Sql,
  source: string,
  token: string,
  error: { code: string | null; message: string } | null,
): Promise<void> {
  const code = error?.code ?? null
  const text = error === null ? null : error.code === null ? error.message : `${error.code}: ${error.message}`
  await sql`
    update backfill_cursors
    set lease_token = null, lease_until = null, last_pass_at = now(), last_error = ${text},
        last_error_code = ${code}, updated_at = now()
    where source = ${source} and lease_token = ${token}`
}

/** The event ids of `source` the ledger already holds, among `eventIds`. */
export async function eventsInLedger(
  sql: postgres.Sql,
  source: string,
  eventIds: readonly string[],
): Promise<Set<string>> {
  if (eventIds.length === 0) return new Set()
  const rows = await sql<Array<{ event_id: string }>>`
    select event_id from inbound_events where source = ${source} and event_id = any(${eventIds}::text[])`
  return new Set(rows.map((row) => row.event_id))
}

/** The guids among `guids` whose redelivery was already asked for. */
export async function redeliveriesRequested(
  sql: postgres.Sql,
  source: string,
  guids: readonly string[],
): Promise<Set<string>> {
  if (guids.length === 0) return new Set()
  const rows = await sql<Array<{ guid: string }>>`
    select guid from backfill_redeliveries where source = ${source} and guid = any(${guids}::text[])`
  return new Set(rows.map((row) => row.guid))
}

/** Records an accepted redelivery request, so no later pass asks for that delivery again. */
export async function recordRedelivery(
  sql: postgres.Sql,
  source: string,
  request: { guid: string; deliveryId: string; event: string | null },
): Promise<void> {
  await sql`
    insert into backfill_redeliveries (source, guid, delivery_id, event)
    values (${source}, ${request.guid}, ${request.deliveryId}, ${request.event})
    on conflict (source, guid) do nothing`
}
