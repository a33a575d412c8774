import type { FC, PropsWithChildren } from 'hono/jsx'
import type { listApprovals } from '../../db/operation-queries.js'
import type { ApprovalView, Decision } from '../../outbound/approvals.js'
import { Badge, CsrfField, Json, Layout, type PageProps, utc } from './layout.js'
import { NamedBy } from './operation.js'
import { Table } from './tables.js'

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
        <Table
          rows={decided}
          columns={[
            { head: 'Asked', class: 'mono', cell: (a) => utc(a.createdAt) },
            { head: 'Operation', class: 'mono', cell: (a) => a.operationKey },
            { head: 'Tool', cell: (a) => a.tool },
            { head: 'Proposed', cell: (a) => a.proposedAction },
            { head: 'Decision', cell: (a) => a.decision ?? '' },
          ]}
        />
      </>
    )}
  </Layout>
)

const ApprovalCard: FC<{ view: ApprovalView; csrf: string }> = ({ view, csrf }) => {
  const op = view.operation
  const undo = view.action === 'undo'
  const card = { view, csrf }
  return (
    <section class="card" id={`approval-${view.id}`}>
      <div class="row">
        <strong class="mono">{op.key}</strong>
        <Badge status={op.status} />
        <span class="muted">
          {op.tool} · {op.effect} · {undo ? 'undo of the effect' : 'the effect itself'} · asked{' '}
          {utc(new Date(view.createdAt))}
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
          <Table
            rows={view.attempts}
            columns={[
              { head: '#', cell: (a) => a.attempt },
              { head: 'Key sent', class: 'mono', cell: (a) => a.attemptKey },
              { head: 'Status', cell: (a) => <Badge status={a.status} /> },
              { head: 'Started', class: 'mono', cell: (a) => utc(new Date(a.startedAt)) },
              { head: 'Error', class: 'err', cell: (a) => a.error ?? '' },
            ]}
          />
        </>
      )}
      <div class="decisions">
        <DecisionForm
          {...card}
          decision="retry"
          explain={undo ? 'Run the undo again.' : 'Allow one more execution of exactly these arguments.'}
        />
        <DecisionForm
          {...card}
          decision="record_success"
          explain="The effect happened; record it and run nothing."
          button="ok"
        >
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
        </DecisionForm>
        <DecisionForm
          {...card}
          decision="abandon"
          explain={undo ? 'Leave the effect in place.' : 'Give up: nothing runs this operation again.'}
          button="danger"
        />
      </div>
    </section>
  )
}

const DECISION_TITLES: Record<Decision, string> = {
  retry: 'Retry',
  record_success: 'Record success',
  abandon: 'Abandon',
}

/** One decision's form, outlined when it is the one proposed; its own fields come before the note. */
const DecisionForm: FC<
  PropsWithChildren<{
    view: ApprovalView
    csrf: string
    decision: Decision
    explain: string
    button?: 'ok' | 'danger'
  }>
> = ({ view, csrf, decision, explain, button, children }) => {
  const proposed = view.proposedAction === decision
  const title = DECISION_TITLES[decision]
  return (
    <form
      method="post"
      action={`/admin/approvals/${view.id}/decision`}
      class={proposed ? 'proposed' : undefined}
    >
      <CsrfField token={csrf} />
      <input type="hidden" name="decision" value={decision} />
      {/* The hash shown above: a retry is bound to exactly these arguments. */}
      {decision === 'retry' ? <input type="hidden" name="payloadHash" value={view.payloadHash} /> : null}
      <strong>
        {title}
        {proposed ? <span class="badge b-info">proposed</span> : null}
      </strong>
      <span class="muted">{explain}</span>
      {children}
      <label>
        Note
        <input name="note" />
      </label>
      <button type="submit" class={button}>
        {title}
      </button>
    </form>
  )
}
