import type postgres from 'postgres'
import { estimatedRows } from '../db/gauge-queries.js'
import { outboundGaugeReads } from '../db/operation-queries.js'
import { addGauge, type Metrics, OTHER_LABEL } from '../metrics.js'

/**
 * The outbound ledger on /metrics, read on scrape, each query served by a status index. The two queues that wait for a person get their
 * own series (count and oldest age), so an alert needs no label arithmetic: an operation whose
 * outcome is unknown, or an approval nobody decided, is work that stops until someone acts.
 */
export function addOutboundGauges(
  metrics: Metrics,
  client: postgres.Sql,
  options: {
    /** The tool names that get a label of their own; every other tool is `other`. */
    tools: readonly string[]
    /** `retention.operationDays`: live operations unchanged for longer are reported. */
    operationDays: number
  },
): void {
  const reads = outboundGaugeReads(client)
  const tools = [...new Set(options.tools)]
  addGauge(metrics, {
    name: 'hookledger_operations',
    help: `Outbound operations not yet settled, by tool (configured tools; '${OTHER_LABEL}' for any other) and status`,
    labelNames: ['tool', 'status'],
    read: async () => {
      const rows = await reads.byToolAndStatus(tools)
      return rows.map((row) => ({ labels: { tool: row.tool, status: row.status }, value: row.n }))
    },
  })
  addGauge(metrics, {
    name: 'hookledger_operations_unsettled_past_retention',
    help: 'Operations still owed a retry, a reconciliation or a decision, unchanged for longer than retention.operationDays (never deleted), by status',
    labelNames: ['status'],
    read: async () => {
      const rows = await reads.pastRetention(options.operationDays)
      return rows.map((row) => ({ labels: { status: row.status }, value: row.n }))
    },
  })
  addGauge(metrics, {
    name: 'hookledger_operations_estimated_rows',
    help: "Outbound operations in the ledger, all statuses: PostgreSQL's estimate (planner and statistics system)",
    labelNames: [],
    read: async () => [{ labels: {}, value: await estimatedRows(client, 'operations') }],
  })
  addGauge(metrics, {
    name: 'hookledger_operations_needs_reconciliation',
    help: 'Operations whose outcome is unknown and not yet reconciled',
    labelNames: [],
    read: async () => {
      return [{ labels: {}, value: await reads.needingReconciliation() }]
    },
  })
  addGauge(metrics, {
    name: 'hookledger_approvals_pending',
    help: 'Approvals waiting for a human decision',
    labelNames: [],
    read: async () => {
      return [{ labels: {}, value: await reads.pendingApprovals() }]
    },
  })
  addGauge(metrics, {
    name: 'hookledger_approvals_oldest_pending_seconds',
    help: 'Age of the oldest approval waiting for a decision (0 when none waits)',
    labelNames: [],
    read: async () => {
      return [{ labels: {}, value: await reads.oldestPendingApprovalSeconds() }]
    },
  })
}
