import { Hono } from 'hono'
import { z } from 'zod'
import { assertNever } from '../../assert.js'
import type { Database } from '../../db/client.js'
import { findOperationDetail, listApprovals, listOperations } from '../../db/operation-queries.js'
import { operationStatus } from '../../db/outbound-schema.js'
import { type ApprovalView, decide, showApproval } from '../../outbound/approvals.js'
import { ApprovalsPage } from './approvals.js'
import { describeIssues } from './filters.js'
import { type AdminEnv, requireCsrfToken } from './guard.js'
import { MessagePage } from './layout.js'
import { flashNotice, takeNotice } from './notices.js'
import { OperationPage } from './operation.js'
import { OperationsPage } from './operations.js'
import type { AdminSessions } from './session.js'

const PENDING_SHOWN = 50
const OPERATIONS_SHOWN = 200
const uuid = z.uuid()
const BACK = { href: '/admin/approvals', label: '« Approvals' }

// Unknown outcomes by default: they are what a person has to look at; 'all' lists every status.
const operationsQuery = z.object({
  status: z.enum([...operationStatus.enumValues, 'all']).default('needs_reconciliation'),
})

// Empty fields are absent: a form sends every field, filled or not.
const blank = (value: string | undefined) => (value === undefined || value.trim() === '' ? undefined : value)
const decisionForm = z.object({
  decision: z.enum(['retry', 'record_success', 'abandon']),
  payloadHash: z.string().optional().transform(blank),
  evidence: z.string().optional().transform(blank),
  result: z.string().optional().transform(blank),
  downstreamId: z.string().max(500).optional().transform(blank),
  note: z.string().max(2000).optional().transform(blank),
})

/** `/admin/operations` and `/admin/approvals`: what the outbound ledger could not settle alone. */
export function approvalRoutes(deps: { db: Database; sessions: AdminSessions }) {
  return new Hono<AdminEnv>()
    .get('/operations', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const parsed = operationsQuery.safeParse(c.req.query())
      if (!parsed.success) {
        const title = `Bad filter: ${describeIssues(parsed.error)}`
        return c.html(<MessagePage props={{ title, user, section: 'operations' }} />, 400)
      }
      const status = parsed.data.status
      const operations = await listOperations(deps.db, {
        status: status === 'all' ? undefined : status,
        limit: OPERATIONS_SHOWN,
      })
      return c.html(
        <OperationsPage
          page={{ title: 'Operations', user, section: 'operations' }}
          status={status}
          operations={operations}
          limit={OPERATIONS_SHOWN}
        />,
      )
    })
    .get('/operations/:id', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const id = c.req.param('id')
      const detail = uuid.safeParse(id).success ? await findOperationDetail(deps.db, id) : undefined
      if (detail === undefined) {
        const back = { href: '/admin/operations?status=all', label: '« All operations' }
        const props = { title: 'No operation has that id', user, section: 'operations' as const }
        return c.html(<MessagePage props={props} back={back} />, 404)
      }
      const title = detail.operation.operationKey
      return c.html(<OperationPage page={{ title, user, section: 'operations' }} detail={detail} />)
    })
    .get('/approvals', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const rows = await listApprovals(deps.db, { status: 'pending', limit: PENDING_SHOWN })
      const pending: ApprovalView[] = []
      for (const row of rows) {
        const view = await showApproval(deps.db, row.id)
        if (view !== undefined) pending.push(view)
      }
      const decided = await listApprovals(deps.db, { status: 'decided', limit: 20 })
      return c.html(
        <ApprovalsPage
          page={{ title: 'Approvals', user, section: 'approvals', notice: takeNotice(c) }}
          pending={pending}
          decided={decided}
        />,
      )
    })
    .post('/approvals/:id/decision', requireCsrfToken(deps.sessions), async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const message = (title: string, status: 400 | 404 | 409) =>
        c.html(<MessagePage props={{ title, user, section: 'approvals' }} back={BACK} />, status)
      const id = c.req.param('id')
      if (!uuid.safeParse(id).success) return message('No approval has that id.', 404)
      const parsed = decisionForm.safeParse(c.get('form'))
      if (!parsed.success) return message(`Bad decision: ${describeIssues(parsed.error)}`, 400)
      const form = parsed.data
      const evidence = parseJsonField(form.evidence, 'evidence')
      const result = parseJsonField(form.result, 'result')
      if (!evidence.ok) return message(evidence.message, 400)
      if (!result.ok) return message(result.message, 400)
      const outcome = await decide(deps.db, {
        approvalId: id,
        decision: form.decision,
        by: user.name,
        payloadHash: form.payloadHash,
        evidence: evidence.value,
        result: result.value,
        downstreamId: form.downstreamId,
        note: form.note,
      })
      switch (outcome.kind) {
        case 'decided':
          flashNotice(c, 'decided')
          return c.redirect('/admin/approvals', 303)
        case 'not_found':
          return message('No approval has that id.', 404)
        case 'already_decided':
          return message(
            `Already decided (${outcome.decision ?? 'none'} by ${outcome.by ?? 'nobody'}): nothing changed.`,
            409,
          )
        case 'payload_mismatch':
          return message(
            `The operation's arguments are not the ones shown: a retry is bound to payload ${outcome.expected}. Nothing changed.`,
            409,
          )
        case 'invalid':
          return message(`Not decided: ${outcome.message}.`, 400)
        default:
          return assertNever(outcome)
      }
    })
}

function parseJsonField(
  text: string | undefined,
  name: string,
): { ok: true; value: unknown } | { ok: false; message: string } {
  if (text === undefined) return { ok: true, value: undefined }
  try {
    return { ok: true, value: JSON.parse(text) }
  } catch {
    return { ok: false, message: `The ${name} must be JSON (for example {"seen": "in the dashboard"}).` }
  }
}
