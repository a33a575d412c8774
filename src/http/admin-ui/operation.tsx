import type { FC } from 'hono/jsx'
import type { EvidenceRow } from '../../db/evidence.js'
import type { OperationDetail } from '../../db/operation-queries.js'
import { Badge, Json, Layout, type PageProps, utc } from './layout.js'
import { Facts, lastError, Table } from './tables.js'

/** One outbound operation: its arguments and result, every attempt, the audit trail and its approvals. */
export const OperationPage: FC<{ page: PageProps; detail: OperationDetail }> = ({ page, detail }) => {
  const { operation: op, attempts, audit, approvals, namedBy } = detail
  const pending = approvals.some((a) => a.status === 'pending')
  return (
    <Layout {...page}>
      <div class="row">
        <h1 style="margin:0" class="mono">
          {op.operationKey}
        </h1>
        <Badge status={op.status} />
        {pending ? <a href="/admin/approvals">Decide on the Approvals page »</a> : null}
      </div>
      <p class="muted">
        <a href="/admin/operations?status=all">« Operations</a>
      </p>
      <Facts
        facts={[
          { name: 'Tool', value: `${op.tool} (${op.effectClass})` },
          { name: 'Payload sha256', value: op.payloadHash, class: 'mono' },
          { name: 'Attempts', value: `${op.attempts} (this round ${op.roundAttempts})` },
          { name: 'Downstream id', value: op.downstreamId ?? '—', class: 'mono' },
          { name: 'Created', value: utc(op.createdAt), class: 'mono' },
          { name: 'Updated', value: utc(op.updatedAt), class: 'mono' },
          { name: 'Completed', value: utc(op.completedAt), class: 'mono' },
          { name: 'Last error', ...lastError(op.status, op.lastError ?? '—') },
        ]}
      />
      <div class="grid2">
        <section>
          <h2>Arguments</h2>
          <Json value={op.args} />
        </section>
        <section>
          <h2>Result</h2>
          <Json value={op.resultJson} />
          {op.evidence === null ? null : (
            <>
              <h2>Evidence</h2>
              <Json value={op.evidence} />
            </>
          )}
        </section>
      </div>

      <h2>Attempts</h2>
      <Table
        rows={attempts}
        empty="No call went out."
        columns={[
          { head: '#', cell: (a) => a.attempt },
          { head: 'Key sent', class: 'mono', cell: (a) => a.attemptKey },
          { head: 'Status', cell: (a) => <Badge status={a.status} /> },
          { head: 'Started', class: 'mono', cell: (a) => utc(a.startedAt) },
          { head: 'Duration', cell: (a) => duration(a.startedAt, a.finishedAt) },
          { head: 'Error', shown: (a) => lastError(op.status, a.error) },
        ]}
      />

      <NamedBy rows={namedBy} />

      <h2>Approvals</h2>
      <Table
        rows={approvals}
        empty="No person was asked about it."
        columns={[
          { head: 'Asked', class: 'mono', cell: (a) => utc(a.createdAt) },
          { head: 'Why', cell: (a) => a.reason },
          { head: 'Proposed', cell: (a) => a.proposedAction },
          {
            head: 'Decision',
            cell: (a) => (a.decision === null ? <Badge status="awaiting_approval" /> : a.decision),
          },
          { head: 'By', cell: (a) => a.decidedBy ?? '' },
          { head: 'Note', cell: (a) => a.note ?? '' },
        ]}
      />

      <h2>Audit trail</h2>
      <Table
        rows={audit}
        columns={[
          { head: 'At', class: 'mono', cell: (entry) => utc(entry.at) },
          { head: 'Event', cell: (entry) => entry.event },
          { head: 'From → to', cell: (entry) => `${entry.fromStatus ?? '—'} → ${entry.toStatus ?? '—'}` },
          { head: 'Actor', cell: (entry) => entry.actor },
          {
            head: 'Details',
            class: 'mono',
            style: 'overflow-wrap:anywhere',
            cell: (entry) => (entry.details === null ? '' : JSON.stringify(entry.details)),
          },
        ]}
      />
    </Layout>
  )
}

/** How long a call or a handler run took; '—' while it has not finished. */
export function duration(started: Date, finished: Date | null): string {
  if (finished === null) return '—'
  const ms = finished.getTime() - started.getTime()
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`
}

/**
 * Inbound events that named the operation as evidence. One that did not apply (received before the
 * claim, outside its rule's scope) is shown with why: a hint for the person deciding, not a verdict.
 */
export const NamedBy: FC<{ rows: readonly EvidenceRow[] }> = ({ rows }) =>
  rows.length === 0 ? null : (
    <>
      <h2>Events that named it</h2>
      <Table
        rows={rows}
        columns={[
          { head: 'Received', class: 'mono', cell: (row) => utc(row.receivedAt) },
          {
            head: 'Event',
            class: 'mono',
            cell: (row) => `${row.source}/${row.eventId} ${row.eventType ?? ''}`,
          },
          { head: 'Says', cell: (row) => row.outcome },
          { head: 'Status', cell: (row) => <Badge status={row.status} /> },
          { head: 'Why not applied', cell: (row) => row.note ?? '' },
        ]}
      />
    </>
  )
