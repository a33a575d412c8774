import type { FC } from 'hono/jsx'
import type { listOperations } from '../../db/operation-queries.js'
import { type OperationStatus, operationStatus } from '../../db/outbound-schema.js'
import { Badge, Layout, type PageProps, utc } from './layout.js'
import { lastError, Table } from './tables.js'

export interface OperationsPageProps {
  page: PageProps
  status: OperationStatus | 'all'
  operations: Awaited<ReturnType<typeof listOperations>>
  limit: number
}

/** Outbound operations by status; by default the ones whose outcome is unknown. */
export const OperationsPage: FC<OperationsPageProps> = ({ page, status, operations, limit }) => (
  <Layout {...page}>
    <h1>Operations</h1>
    <form class="filters" method="get" action="/admin/operations">
      <label>
        Status
        <select name="status">
          <option value="all" selected={status === 'all'}>
            all
          </option>
          {operationStatus.enumValues.map((value) => (
            <option value={value} selected={value === status}>
              {value}
            </option>
          ))}
        </select>
      </label>
      <button type="submit">Show</button>
    </form>
    {status === 'needs_reconciliation' ? (
      <p class="muted">
        Unknown outcomes: the call may have landed. Reconciliation asks the tool's system; what it cannot
        settle becomes an approval.
      </p>
    ) : null}
    <Table
      rows={operations}
      empty={status === 'all' ? 'No operation yet.' : `No operation is ${status}.`}
      columns={[
        { head: 'Key', class: 'mono', cell: (op) => <a href={`/admin/operations/${op.id}`}>{op.key}</a> },
        { head: 'Tool', cell: (op) => op.tool },
        { head: 'Effect', cell: (op) => op.effect },
        { head: 'Status', cell: (op) => <Badge status={op.status} /> },
        { head: 'Attempts', cell: (op) => op.attempts },
        { head: 'Updated', class: 'mono', cell: (op) => utc(op.updatedAt) },
        { head: 'Last error', shown: (op) => lastError(op.status, op.lastError, 200) },
      ]}
    />
    {operations.length >= limit ? <p class="muted">Showing the {limit} most recently updated.</p> : null}
  </Layout>
)
