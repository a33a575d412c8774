import type postgres from 'postgres'
import { addGauge, type Metrics } from '../metrics.js'

/**
 * The outbound ledger on /metrics, read on scrape. The two queues that wait for a person get their
 * own series (count and oldest age), so an alert needs no label arithmetic: an operation whose
 * outcome is unknown, or an approval nobody decided, is work that stops until someone acts.
 */
export function addOutboundGauges(metrics: Metrics, client: postgres.Sql): void {
  addGauge(metrics, {
    name: 'hookledger_operations',
    help: 'Outbound operations in the ledger, by tool and status',
    labelNames: ['tool', 'status'],
    read: async () => {
      const rows = await client<Array<{ tool: string; status: string; n: number }>>`
        select tool, status::text as status, count(*)::int as n from operations group by tool, status`
      return rows.map((row) => ({ labels: { tool: row.tool, status: row.status }, value: row.n }))
    },
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
