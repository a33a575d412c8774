import type { FC } from 'hono/jsx'
import type { listApprovals } from '../../db/operation-queries.js'
import type { ApprovalView } from '../../outbound/approvals.js'
import { Badge, CsrfField, Json, Layout, type PageProps, utc } from './layout.js'
import { NamedBy } from './operation.js'

export interface ApprovalsPageProps {
  page: PageProps & { user: { name: string; csrf: string } }
  pending: readonly ApprovalView[]
  decided: Awaited<ReturnType<typeof listApprovals>>
}

/** Pending approvals with everything the source document's gate asks the approver to see. */
export const ApprovalsPage: FC<ApprovalsPageProps> = ({ page, pending, decided }) => (
  <Layout {...page}>
    <h1>Approvals</h1>
    {pending.length === 0 ? <p class="muted">Nothing is waiting for a decision.</p> : null}
    {pending.map((view) => (
      <ApprovalCard view={view} csrf={page.user.csrf} />
    ))}
    {decided.length === 0 ? null : (
      <>
        <h2>Recently decided</h2>
        <table>
          <thead>
            <tr>
              <th>Asked</th>
              <th>Operation</th>
              <th>Tool</th>
              <th>Proposed</th>
              <th>Decision</th>
            </tr>
          </thead>
          <tbody>
            {decided.map((a) => (
              <tr>
                <td class="mono">{utc(a.createdAt)}</td>
                <td class="mono">{a.operationKey}</td>
                <td>{a.tool}</td>
                <td>{a.proposedAction}</td>
                <td>{a.decision ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </>
    )}
  </Layout>
)

const ApprovalCard: FC<{ view: ApprovalView; csrf: string }> = ({ view, csrf }) => {
  const op = view.operation
  const action = `/admin/approvals/${view.id}/decision`
  const proposed = (decision: string) => (view.proposedAction === decision ? 'proposed' : undefined)
  return (
    <section class="card" id={`approval-${view.id}`}>
      <div class="row">
        <strong class="mono">{op.key}</strong>
        <Badge status={op.status} />
        <span class="muted">
          {op.tool} · {op.effect} · {view.action === 'undo' ? 'undo of the effect' : 'the effect itself'} ·
          asked {utc(new Date(view.createdAt))}
        </span>
      </div>
      <p>
        <strong>Why:</strong> {view.reason}
        <br />
        <strong>Proposed action:</strong> <span class="badge b-info">{view.proposedAction}</span>
      </p>
      <div class="grid2">
        <div>
          <h2>Arguments</h2>
          <Json value={op.args} />
          <p class="mono muted hash">payload sha256 {view.payloadHash}</p>
        </div>
        <div>
          <h2>Evidence</h2>
          <Json value={view.evidence} wrap />
        </div>
      </div>
      <NamedBy rows={view.namedBy} />
      {view.attempts.length === 0 ? null : (
        <>
          <h2>Attempts</h2>
          <table>
            <thead>
              <tr>
                <th>#</th>
                <th>Key sent</th>
                <th>Status</th>
                <th>Started</th>
                <th>Error</th>
              </tr>
            </thead>
            <tbody>
              {view.attempts.map((a) => (
                <tr>
                  <td>{a.attempt}</td>
                  <td class="mono">{a.attemptKey}</td>
                  <td>
                    <Badge status={a.status} />
                  </td>
                  <td class="mono">{utc(new Date(a.startedAt))}</td>
                  <td class="err">{a.error ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <div class="decisions">
        <form method="post" action={action} class={proposed('retry')}>
          <CsrfField token={csrf} />
          <input type="hidden" name="decision" value="retry" />
          {/* The hash shown above: a retry is bound to exactly these arguments. */}
          <input type="hidden" name="payloadHash" value={view.payloadHash} />
          <strong>
            Retry
            {view.proposedAction === 'retry' ? <span class="badge b-info">proposed</span> : null}
          </strong>
          <span class="muted">
            {view.action === 'undo'
              ? 'Run the undo again.'
              : 'Allow one more execution of exactly these arguments.'}
          </span>
          <label>
            Note
            <input name="note" />
          </label>
          <button type="submit">Retry</button>
        </form>
        <form method="post" action={action} class={proposed('record_success')}>
          <CsrfField token={csrf} />
          <input type="hidden" name="decision" value="record_success" />
          <strong>
            Record success
            {view.proposedAction === 'record_success' ? <span class="badge b-info">proposed</span> : null}
          </strong>
          <span class="muted">The effect happened; record it and run nothing.</span>
          <label>
            Evidence (JSON, required)
            <textarea name="evidence" required placeholder='{"seen": "in the provider dashboard"}' />
          </label>
          <label>
            Result (JSON, optional)
            <textarea name="result" />
          </label>
          <label>
            Downstream id
            <input name="downstreamId" />
          </label>
          <label>
            Note
            <input name="note" />
          </label>
          <button type="submit" class="ok">
            Record success
          </button>
        </form>
        <form method="post" action={action} class={proposed('abandon')}>
          <CsrfField token={csrf} />
          <input type="hidden" name="decision" value="abandon" />
          <strong>
            Abandon
            {view.proposedAction === 'abandon' ? <span class="badge b-info">proposed</span> : null}
          </strong>
          <span class="muted">
            {view.action === 'undo'
              ? 'Leave the effect in place.'
              : 'Give up: nothing runs this operation again.'}
          </span>
          <label>
            Note
            <input name="note" />
          </label>
          <button type="submit" class="danger">
            Abandon
          </button>
        </form>
      </div>
    </section>
  )
}
