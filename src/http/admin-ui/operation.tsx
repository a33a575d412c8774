import type { FC } from 'hono/jsx'
import type { EvidenceRow } from '../../db/evidence.js'
import type { OperationDetail } from '../../db/operation-queries.js'
import { Badge, Fact, Json, LastError, Layout, type PageProps, utc } from './layout.js'

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
      <table class="facts">
        <tbody>
          <Fact name="Tool" value={`${op.tool} (${op.effectClass})`} />
          <Fact name="Payload sha256" value={op.payloadHash} mono />
          <Fact name="Attempts" value={`${op.attempts} (this round ${op.roundAttempts})`} />
          <Fact name="Downstream id" value={op.downstreamId ?? '—'} mono />
          <Fact name="Created" value={utc(op.createdAt)} mono />
          <Fact name="Updated" value={utc(op.updatedAt)} mono />
          <Fact name="Completed" value={utc(op.completedAt)} mono />
          <tr>
            <th>Last error</th>
            <LastError status={op.status} error={op.lastError ?? '—'} />
          </tr>
        </tbody>
      </table>
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
      {attempts.length === 0 ? (
        <p class="muted">No call went out.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th>#</th>
              <th>Key sent</th>
              <th>Status</th>
              <th>Started</th>
              <th>Duration</th>
              <th>Error</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => (
              <tr>
                <td>{a.attempt}</td>
                <td class="mono">{a.attemptKey}</td>
                <td>
                  <Badge status={a.status} />
                </td>
                <td class="mono">{utc(a.startedAt)}</td>
                <td>{duration(a.startedAt, a.finishedAt)}</td>
                <LastError status={op.status} error={a.error} />
              </tr>
            ))}
          </tbody>
        </table>
      )}

      <NamedBy rows={namedBy} />

      <h2>Approvals</h2>
      {approvals.length === 0 ? (
        <p class="muted">No person was asked about it.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th>Asked</th>
              <th>Why</th>
              <th>Proposed</th>
              <th>Decision</th>
              <th>By</th>
              <th>Note</th>
            </tr>
          </thead>
          <tbody>
            {approvals.map((a) => (
              <tr>
                <td class="mono">{utc(a.createdAt)}</td>
                <td>{a.reason}</td>
                <td>{a.proposedAction}</td>
                <td>{a.decision === null ? <Badge status="awaiting_approval" /> : a.decision}</td>
                <td>{a.decidedBy ?? ''}</td>
                <td>{a.note ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}

      <h2>Audit trail</h2>
      <table>
        <thead>
          <tr>
            <th>At</th>
            <th>Event</th>
            <th>From → to</th>
            <th>Actor</th>
            <th>Details</th>
          </tr>
        </thead>
        <tbody>
          {audit.map((entry) => (
            <tr>
              <td class="mono">{utc(entry.at)}</td>
              <td>{entry.event}</td>
              <td>
                {entry.fromStatus ?? '—'} → {entry.toStatus ?? '—'}
              </td>
              <td>{entry.actor}</td>
              <td class="mono" style="overflow-wrap:anywhere">
                {entry.details === null ? '' : JSON.stringify(entry.details)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
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
      <table>
        <thead>
          <tr>
            <th>Received</th>
            <th>Event</th>
            <th>Says</th>
            <th>Status</th>
            <th>Why not applied</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr>
              <td class="mono">{utc(row.receivedAt)}</td>
              <td class="mono">
                {row.source}/{row.eventId} {row.eventType ?? ''}
              </td>
              <td>{row.outcome}</td>
              <td>
                <Badge status={row.status} />
              </td>
              <td>{row.note ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  )
