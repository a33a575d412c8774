import type postgres from 'postgres'
import type { OperationStatus } from './outbound-schema.js'

// The deletes retention runs (src/retention/loop.ts), one bounded batch per call, each returning how
// many rows it deleted. SKIP LOCKED everywhere: several workers sweeping at once split the rows
// instead of queueing on them.

/** Operations nothing will run or decide again. The others are owed work or a human's decision. */
const SETTLED_OPERATIONS: OperationStatus[] = ['completed', 'compensated', 'exhausted', 'failed', 'abandoned']

/**
 * Up to `limit` of a source's DONE events received more than `days` ago, oldest first. With
 * `wholePeriods` (a source whose retention is the longest, so its periods are dropped whole by
 * dropExpiredPeriods), only those received before the start of the period that `days` ago falls in:
 * the rest of that period goes whole, and deleting its rows one by one first would leave the dead
 * tuples partitioning is there to avoid.
 */
export async function deleteDoneEvents(
  client: postgres.Sql,
  options: { source: string; days: number; limit: number; wholePeriods: boolean },
): Promise<number> {
  const horizon = client`now() - ${options.days} * interval '1 day'`
  const before = options.wholePeriods
    ? client`coalesce((select starts from ledger_periods where starts <= ${horizon} and ends > ${horizon}), ${horizon})`
    : horizon
  const deleted = await client`
    delete from inbound_events where id in (
      select id from inbound_events
      where source = ${options.source} and status = 'done'
        and received_at < ${before}
      order by received_at
      limit ${options.limit}
      for update skip locked)`
  return deleted.count
}

/**
 * Up to `limit` settled operations unchanged for more than `days`, with their attempts and approvals
 * (foreign keys) and their audit entries, in one transaction. The audit refuses every other delete
 * (migration 0010); this transaction alone says it is the sweep.
 */
export async function deleteSettledOperations(
  client: postgres.Sql,
  options: { days: number; limit: number },
): Promise<number> {
  const deleted = await client.begin(async (tx) => {
    await tx`select set_config('hookledger.retention_sweep', 'on', true)`
    const [row] = await tx<Array<{ operations: number }>>`
      with expired as (
        select id from operations
        where status = any(${SETTLED_OPERATIONS}::operation_status[])
          and updated_at < now() - ${options.days} * interval '1 day'
        order by updated_at
        limit ${options.limit}
        for update skip locked),
      audit as (delete from operation_audit a using expired e where a.operation_id = e.id),
      deleted as (delete from operations o using expired e where o.id = e.id returning o.id)
      select count(*)::int as operations from deleted`
    return row?.operations ?? 0
  })
  return deleted
}

/**
 * Up to `limit` pieces of evidence (operation_evidence) received more than `days` ago whose key no
 * open operation has: the evidence that settled an operation, and evidence about one this ledger
 * never saw.
 */
export async function deleteSettledEvidence(
  client: postgres.Sql,
  options: { days: number; limit: number },
): Promise<number> {
  const deleted = await client`
    delete from operation_evidence where id in (
      select v.id from operation_evidence v
      where v.received_at < now() - ${options.days} * interval '1 day'
        and not exists (
          select 1 from operations o
          where o.operation_key = v.operation_key
            and o.status <> all(${SETTLED_OPERATIONS}::operation_status[]))
      order by v.id
      limit ${options.limit}
      for update skip locked)`
  return deleted.count
}

/**
 * Up to `limit` GitHub redeliveries a backfill asked for (backfill_redeliveries), older than their
 * source's `hours`, or than `otherHours` for a source not in `sources`.
 */
export async function deleteExpiredRedeliveries(
  client: postgres.Sql,
  options: { sources: ReadonlyArray<{ source: string; hours: number }>; otherHours: number; limit: number },
): Promise<number> {
  const deleted = await client`
    delete from backfill_redeliveries where (source, guid) in (
      select r.source, r.guid from backfill_redeliveries r
      left join unnest(${options.sources.map((s) => s.source)}::text[], ${options.sources.map((s) => s.hours)}::int[])
        as kept(source, hours) on kept.source = r.source
      where r.requested_at < now() - coalesce(kept.hours, ${options.otherHours}) * interval '1 hour'
      limit ${options.limit}
      for update of r skip locked)`
  return deleted.count
}

/**
 * Up to `limit` conflict records (inbound_conflicts) older than their source's `days`, or than
 * `otherDays` for a source not in `sources`.
 */
export async function deleteExpiredConflicts(
  client: postgres.Sql,
  options: { sources: ReadonlyArray<{ source: string; days: number }>; otherDays: number; limit: number },
): Promise<number> {
  const deleted = await client`
    delete from inbound_conflicts where id in (
      select c.id from inbound_conflicts c
      left join unnest(${options.sources.map((s) => s.source)}::text[], ${options.sources.map((s) => s.days)}::int[])
        as kept(source, days) on kept.source = c.source
      where c.received_at < now() - coalesce(kept.days, ${options.otherDays}) * interval '1 day'
      limit ${options.limit}
      for update of c skip locked)`
  return deleted.count
}
