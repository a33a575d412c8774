import type { FC } from 'hono/jsx'
import type { listOperations } from '../../db/operation-queries.js'
import { type OperationStatus, operationStatus } from '../../db/outbound-schema.js'
import { Badge, LastError, Layout, type PageProps, utc } from './layout.js'

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
    {operations.length === 0 ? (
      <p class="muted">{status === 'all' ? 'No operation yet.' : `No operation is ${status}.`}</p>
    ) : (
      <table>
        <thead>
          <tr>
            <th>Key</th>
            <th>Tool</th>
            <th>Effect</th>
            <th>Status</th>
            <th>Attempts</th>
            <th>Updated</th>
            <th>Last error</th>
          </tr>
        </thead>
        <tbody>
          {operations.map((op) => (
            <tr>
              <td class="mono">
                <a href={`/admin/operations/${op.id}`}>{op.key}</a>
              </td>
              <td>{op.tool}</td>
              <td>{op.effect}</td>
              <td>
                <Badge status={op.status} />
              </td>
              <td>{op.attempts}</td>
              <td class="mono">{utc(op.updatedAt)}</td>
              <LastError status={op.status} error={op.lastError} max={200} />
            </tr>
          ))}
        </tbody>
      </table>
    )}
    {operations.length >= limit ? <p class="muted">Showing the {limit} most recently updated.</p> : null}
  </Layout>
)
