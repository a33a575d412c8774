import type postgres from 'postgres'
import { withDeadline } from '../deadline.js'
import { addGauge, type Metrics, OTHER_LABEL } from '../metrics.js'
import type { JobQueue } from '../queue/backend.js'
import type { ProcessEventData } from '../queue/jobs.js'
import { unqueuedEvents } from './alert-queries.js'

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
  const [row] = await client<Array<{ rows: number }>>`
    select greatest(reltuples, pg_stat_get_live_tuples(oid), 0)::float8 as rows
    from pg_class where oid = to_regclass(${table})`
  return row?.rows ?? 0
}

/**
 * Read on scrape: the ledger's unfinished events, its size, the queue's jobs by state, and the gap
 * between them (`graceMs`: the relay's, after which a committed row should have its job).
 */
export function addLedgerGauges(
  metrics: Metrics,
  client: postgres.Sql,
  queue: JobQueue<ProcessEventData>,
  /** The configured source ids; events of a source no longer configured are counted as `other`. */
  sources: readonly string[],
  /** relay.graceMs: after it, a committed row should have its job. */
  graceMs: number,
): void {
  addGauge(metrics, {
    name: 'hookledger_events',
    help: `Inbound events not yet DONE (pending, processing, failed), by source ('${OTHER_LABEL}': no longer configured) and status`,
    labelNames: ['source', 'status'],
    read: async () => {
      const rows = await client<Array<{ source: string; status: string; n: number }>>`
        select case when source = any(${sources}::text[]) then source else ${OTHER_LABEL} end as source,
               status::text as status, count(*)::int as n
        from inbound_events
        where status in ${client(LIVE_EVENT_STATUSES)} group by 1, 2`
      return rows.map((row) => ({ labels: { source: row.source, status: row.status }, value: row.n }))
    },
  })
  addGauge(metrics, {
    name: 'hookledger_events_estimated_rows',
    help: "Inbound events in the ledger, all statuses: PostgreSQL's estimate (planner and statistics system)",
    labelNames: [],
    read: async () => [{ labels: {}, value: await estimatedRows(client, 'inbound_events') }],
  })
  addGauge(metrics, {
    name: 'hookledger_events_unqueued',
    help:
      'PENDING events committed longer ago than relay.graceMs known to have no job in Redis: never ' +
      "taken (Redis down, or refusing writes), or found lost by the relay's orphan pass and not taken back",
    labelNames: [],
    read: async () => [{ labels: {}, value: await unqueuedEvents(client, graceMs) }],
  })
  addGauge(metrics, {
    name: 'hookledger_queue_jobs',
    help: 'Jobs in the inbound queue, by state',
    labelNames: ['state'],
    read: async () => {
      const counts = await withDeadline(
        queue.getJobCounts('waiting', 'active', 'delayed', 'failed'),
        2000,
        'Redis did not answer the job counts',
      )
      return Object.entries(counts).map(([state, value]) => ({ labels: { state }, value }))
    },
  })
}
