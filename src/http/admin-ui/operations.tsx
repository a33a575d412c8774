import type { FC } from 'hono/jsx'
import type { listOperations } from '../../db/operation-queries.js'
import { type OperationStatus, operationStatus } from '../../db/outbound-schema.js'
import { Badge, Layout, type PageProps, utc } from './layout.js'

export interface OperationsPageProps {
  page: PageProps
  status: OperationStatus
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
      <p class="muted">No operation is {status}.</p>
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
              <td class="mono">{op.key}</td>
              <td>{op.tool}</td>
              <td>{op.effect}</td>
              <td>
                <Badge status={op.status} />
              </td>
              <td>{op.attempts}</td>
              <td class="mono">{utc(op.updatedAt)}</td>
              <td class="err">{op.lastError ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    )}
    {operations.length >= limit ? <p class="muted">Showing the {limit} most recently updated.</p> : null}
  </Layout>
)
