import type postgres from 'postgres'
import { OTHER_LABEL } from '../metrics.js'

/**
 * The statuses counted exactly on scrape. DONE is left out on purpose: it is nearly every row of a
 * ledger, so counting it would scan the table on each scrape (~190 ms at 500k rows). These three are
 * the work still to do, found through inbound_events_status_received_id_idx, so a scrape costs in
 * proportion to the backlog, never to the ledger's size.
 */
export const LIVE_EVENT_STATUSES = ['pending', 'processing', 'failed'] as const

/**
 * A table's row count without counting it: the larger of the planner's figure (pg_class.reltuples,
 * refreshed by ANALYZE and VACUUM) and the statistics system's live rows (inserts minus deletes as
 * transactions commit). The planner's alone reads 0 (-1) on a table never analyzed: a new ledger,
 * or one where autovacuum is off. The live count alone reads 0 after a crash, which resets it.
 */
export async function estimatedRows(client: postgres.Sql, table: string): Promise<number> {
  // Summed over the partitions of a partitioned table, whose own statistics count no live rows.
  const [row] = await client<Array<{ rows: number | null }>>`
    select sum(greatest(c.reltuples, pg_stat_get_live_tuples(c.oid), 0))::float8 as rows
    from pg_class c
    where (c.oid = to_regclass(${table}) and c.relkind <> 'p')
       or c.oid in (select relid from pg_partition_tree(to_regclass(${table})) where isleaf)`
  return row?.rows ?? 0
}

/**
 * Inbound events in a live status, by source and status; a source outside `sources` (no longer
 * configured) is counted as `other`.
 */
export async function liveEventsBySourceAndStatus(
  client: postgres.Sql,
  sources: readonly string[],
): Promise<Array<{ source: string; status: string; n: number }>> {
  return client<Array<{ source: string; status: string; n: number }>>`
    select case when source = any(${sources as string[]}::text[]) then source else ${OTHER_LABEL} end as source,
           status::text as status, count(*)::int as n
    from inbound_events
    where status in ${client(LIVE_EVENT_STATUSES)} group by 1, 2`
}
