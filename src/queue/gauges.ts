import type postgres from 'postgres'
import { unqueuedEvents } from '../db/alert-queries.js'
import { estimatedRows, liveEventsBySourceAndStatus } from '../db/gauge-queries.js'
import { withDeadline } from '../deadline.js'
import { addGauge, type Metrics, OTHER_LABEL } from '../metrics.js'
import type { JobQueue } from './backend.js'
import type { ProcessEventData } from './jobs.js'

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
      const rows = await liveEventsBySourceAndStatus(client, sources)
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
