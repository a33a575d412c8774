import type postgres from 'postgres'
import { estimatedRows } from '../db/gauges.js'
import { addGauge, type Metrics } from '../metrics.js'

/**
 * Operations still in motion or waiting for someone. The settled ones (completed, compensated,
 * exhausted, failed, abandoned) are most of the table and are not counted on scrape: their total is
 * estimated, so a scrape reads through operations_status_updated_idx only the rows that matter.
 */
export const LIVE_OPERATION_STATUSES = [
  'in_progress',
  'needs_reconciliation',
  'awaiting_approval',
  'retry_approved',
] as const

/**
 * The outbound ledger on /metrics, read on scrape, each query served by a status index. The two queues that wait for a person get their
 * own series (count and oldest age), so an alert needs no label arithmetic: an operation whose
 * outcome is unknown, or an approval nobody decided, is work that stops until someone acts.
 */
export function addOutboundGauges(metrics: Metrics, client: postgres.Sql): void {
  addGauge(metrics, {
    name: 'hookledger_operations',
    help: 'Outbound operations not yet settled, by tool and status',
    labelNames: ['tool', 'status'],
    read: async () => {
      const rows = await client<Array<{ tool: string; status: string; n: number }>>`
        select tool, status::text as status, count(*)::int as n from operations
        where status in ${client(LIVE_OPERATION_STATUSES)} group by tool, status`
      return rows.map((row) => ({ labels: { tool: row.tool, status: row.status }, value: row.n }))
    },
  })
  addGauge(metrics, {
    name: 'hookledger_operations_estimated_rows',
    help: "Outbound operations in the ledger, all statuses: PostgreSQL's estimate, updated by autovacuum",
    labelNames: [],
    read: async () => [{ labels: {}, value: await estimatedRows(client, 'operations') }],
  })
  addGauge(metrics, {
    name: 'hookledger_operations_needs_reconciliation',
    help: 'Operations whose outcome is unknown and not yet reconciled',
    labelNames: [],
    read: async () => {
      const [row] = await client<Array<{ n: number }>>`
        select count(*)::int as n from operations where status = 'needs_reconciliation'`
      return [{ labels: {}, value: row?.n ?? 0 }]
    },
  })
  addGauge(metrics, {
    name: 'hookledger_approvals_pending',
    help: 'Approvals waiting for a human decision',
    labelNames: [],
    read: async () => {
      const [row] = await client<Array<{ n: number }>>`
        select count(*)::int as n from approvals where status = 'pending'`
      return [{ labels: {}, value: row?.n ?? 0 }]
    },
  })
  addGauge(metrics, {
    name: 'hookledger_approvals_oldest_pending_seconds',
    help: 'Age of the oldest approval waiting for a decision (0 when none waits)',
    labelNames: [],
    read: async () => {
      const [row] = await client<Array<{ seconds: number }>>`
        select coalesce(extract(epoch from now() - min(created_at))::float8, 0) as seconds
        from approvals where status = 'pending'`
      return [{ labels: {}, value: row?.seconds ?? 0 }]
    },
  })
}
