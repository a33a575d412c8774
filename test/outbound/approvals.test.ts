import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboundSettingsSchema } from '../../src/config/outbound.js'
import { createClaimBatcher } from '../../src/db/claims.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createApp } from '../../src/http/app.js'
import { createLogger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { decide, showApproval } from '../../src/outbound/approvals.js'
import { payloadHash } from '../../src/outbound/hash.js'
import { httpTool } from '../../src/outbound/http-tool.js'
import { createOutboundLedger } from '../../src/outbound/ledger.js'
import { reconcileOperation } from '../../src/outbound/reconcile.js'
import { defineTool, type ReconcileResult } from '../../src/outbound/tools.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { type MockService, startMockService } from '../support/mock-service.js'

let db: TestDatabase
let service: MockService
const logger = createLogger('silent')
const settings = outboundSettingsSchema.parse({ leaseMs: 2000, backoffMaxMs: 200, reconcileDelayMs: 0 })
let ledger: ReturnType<typeof createOutboundLedger>

beforeAll(async () => {
  db = await createTestDatabase()
  service = await startMockService({ honorKeys: false })
  ledger = createOutboundLedger({ db: db.db, logger, settings })
})
afterAll(async () => {
  await service.close()
  await db.drop()
})

function chargeTool(name: string, answer: () => ReconcileResult<string>) {
  let calls = 0
  const tool = defineTool<{ amount: number }, string>({
    name,
    effect: 'irreversible',
    async execute(_args, ctx) {
      calls += 1
      // Every operation's first attempt loses its response.
      if (ctx.attempt === 1) throw new Error('socket hang up')
      return { kind: 'success', result: `charged ${ctx.attempt}` }
    },
    reconcile: async () => answer(),
  })
  return { tool, calls: () => calls }
}

describe('reconciliation and the approval gate', () => {
  it('found: records success with the evidence and runs nothing', async () => {
    const { tool, calls } = chargeTool('charge-found', () => ({
      kind: 'found',
      evidence: { charge: 'ch_9' },
      result: 'ch_9',
      downstreamId: 'ch_9',
    }))
    const outcome = await ledger.invoke(tool, { key: 'order:1:charge', args: { amount: 5 } })
    if (outcome.kind !== 'needs_reconciliation') throw new Error(outcome.kind)
    expect(await reconcileOperation({ db: db.db, ledger, logger }, outcome.operationId)).toEqual({
      kind: 'recorded_success',
    })
    expect(await ledger.invoke(tool, { key: 'order:1:charge', args: { amount: 5 } })).toMatchObject({
      kind: 'completed',
      result: 'ch_9',
      downstreamId: 'ch_9',
    })
    expect(calls()).toBe(1)
  })

  it('not found: an approval with evidence; retry is bound to the payload hash and runs once', async () => {
    const { tool, calls } = chargeTool('charge-missing', () => ({
      kind: 'not_found',
      evidence: { matches: 0 },
    }))
    const args = { amount: 7 }
    const first = await ledger.invoke(tool, { key: 'order:2:charge', args })
    if (first.kind !== 'needs_reconciliation') throw new Error(first.kind)
    const escalated = await reconcileOperation({ db: db.db, ledger, logger }, first.operationId)
    if (escalated.kind !== 'escalated') throw new Error(escalated.kind)
    const view = await showApproval(db.db, escalated.approvalId)
    expect(view).toMatchObject({
      proposedAction: 'retry',
      evidence: { matches: 0 },
      payloadHash: payloadHash(args),
      operation: { key: 'order:2:charge', tool: 'charge-missing', effect: 'irreversible', args },
    })
    expect(view?.attempts.map((a) => a.status)).toEqual(['unknown'])
    expect(await ledger.invoke(tool, { key: 'order:2:charge', args })).toMatchObject({
      kind: 'awaiting_approval',
    })
    const wrong = await decide(db.db, {
      approvalId: escalated.approvalId,
      decision: 'retry',
      by: 'ana',
      payloadHash: payloadHash({ amount: 70 }),
    })
    expect(wrong.kind).toBe('payload_mismatch')
    const ok = await decide(db.db, {
      approvalId: escalated.approvalId,
      decision: 'retry',
      by: 'ana',
      payloadHash: payloadHash(args),
    })
    expect(ok).toMatchObject({ kind: 'decided', status: 'retry_approved' })
    // Changed arguments never ride on the approval.
    expect((await ledger.invoke(tool, { key: 'order:2:charge', args: { amount: 70 } })).kind).toBe(
      'payload_conflict',
    )
    expect(await ledger.invoke(tool, { key: 'order:2:charge', args })).toMatchObject({
      kind: 'completed',
      result: 'charged 2',
    })
    expect(calls()).toBe(2)
    const history = (await showApproval(db.db, escalated.approvalId))?.history ?? []
    expect(history.find((h) => h.event === 'decided_retry')).toMatchObject({
      actor: 'human:ana',
      to: 'retry_approved',
    })
    expect(
      (await decide(db.db, { approvalId: escalated.approvalId, decision: 'abandon', by: 'bo' })).kind,
    ).toBe('already_decided')
  })

  it('record_success needs evidence and runs nothing; abandon stops the operation', async () => {
    const a = chargeTool('charge-cannot-tell', () => ({ kind: 'cannot_tell' }))
    for (const [key, decision] of [
      ['order:3:charge', 'record_success'],
      ['order:4:charge', 'abandon'],
    ] as const) {
      const first = await ledger.invoke(a.tool, { key, args: { amount: 1 } })
      if (first.kind !== 'needs_reconciliation') throw new Error(first.kind)
      const escalated = await reconcileOperation({ db: db.db, ledger, logger }, first.operationId)
      if (escalated.kind !== 'escalated') throw new Error(escalated.kind)
      if (decision === 'record_success') {
        expect((await decide(db.db, { approvalId: escalated.approvalId, decision, by: 'cy' })).kind).toBe(
          'invalid',
        )
      }
      await decide(db.db, {
        approvalId: escalated.approvalId,
        decision,
        by: 'cy',
        evidence: { seen: 'dashboard' },
        result: 'ok',
      })
    }
    expect(await ledger.invoke(a.tool, { key: 'order:3:charge', args: { amount: 1 } })).toMatchObject({
      kind: 'completed',
      result: 'ok',
    })
    expect((await ledger.invoke(a.tool, { key: 'order:4:charge', args: { amount: 1 } })).kind).toBe(
      'abandoned',
    )
    expect(a.calls()).toBe(2)
  })
})

describe('httpTool', () => {
  it('sends the key, classifies answers, and refuses non-public argument URLs unless allow-listed', async () => {
    const tool = httpTool({
      name: 'http-charge',
      url: `${service.url}/charges`,
      method: 'POST',
      effect: 'irreversible',
    })
    expect(
      await ledger.invoke(tool, { key: 'h:1', args: { body: { amount: 3, reference: 'h:1' } } }),
    ).toMatchObject({
      kind: 'completed',
      result: { status: 200 },
    })
    expect(service.requests.at(-1)).toMatchObject({ path: '/charges', key: 'h:1' })
    expect(await ledger.invoke(tool, { key: 'h:2', args: { body: { card: 'declined' } } })).toMatchObject({
      kind: 'failed',
      reason: 'rejected',
    })
    const before = service.requests.length
    for (const url of [
      `${service.url}/charges`,
      'http://169.254.169.254/latest/meta-data',
      'http://localhost:1/',
      'http://[::1]:1/',
    ]) {
      const refused = await ledger.invoke(tool, { key: `h:ssrf:${url}`, args: { url, body: {} } })
      expect(refused).toMatchObject({ kind: 'failed', reason: 'rejected' })
    }
    expect(service.requests.length).toBe(before)
    const allowed = createOutboundLedger({
      db: db.db,
      logger,
      settings: { ...settings, allowHosts: ['127.0.0.1'] },
    })
    expect(
      await allowed.invoke(tool, {
        key: 'h:allowed',
        args: { url: `${service.url}/charges`, body: { amount: 1 } },
      }),
    ).toMatchObject({
      kind: 'completed',
    })
  })
})

/** The HTTP app on this file's ledger, with no sources: only the outbound and admin APIs matter here. */
function app(tokens: { adminToken?: string; agentToken?: string }) {
  return createApp({
    config: buildConfig({ sources: [] }, () => undefined),
    db: db.db,
    claims: createClaimBatcher(db.sql),
    enqueuer: createEnqueuer({ queue: undefined as never, sql: db.sql, logger, failpoints: noFailpoints }),
    logger,
    metrics: createMetrics(),
    readiness: [],
    outbound: ledger,
    ...tokens,
  })
}

describe('HTTP APIs', () => {
  it('refuse without a configured token, and without the right bearer', async () => {
    const closed = app({})
    expect((await closed.request('/admin/api/approvals')).status).toBe(403)
    expect((await closed.request('/v1/operations/claim', { method: 'POST', body: '{}' })).status).toBe(403)
    const open = app({ adminToken: 'a'.repeat(20), agentToken: 'b'.repeat(20) })
    const denied = await open.request('/admin/api/approvals', {
      headers: { authorization: `Bearer ${'b'.repeat(20)}` },
    })
    expect(denied.status).toBe(401)
    expect(await denied.json()).toMatchObject({ error: { code: 'unauthorized' } })
    expect(
      (await open.request('/admin/api/approvals', { headers: { authorization: `Bearer ${'a'.repeat(20)}` } }))
        .status,
    ).toBe(200)
  })

  it('lets an agent claim, report, and get the stored result; conflicts are errors', async () => {
    const api = app({ agentToken: 'b'.repeat(20) })
    const headers = { authorization: `Bearer ${'b'.repeat(20)}`, 'content-type': 'application/json' }
    const claimBody = { key: 'agent:run:refund', tool: 'refund', effect: 'irreversible', args: { amount: 9 } }
    const claim = await api.request('/v1/operations/claim', {
      method: 'POST',
      headers,
      body: JSON.stringify(claimBody),
    })
    const claimed = (await claim.json()) as {
      decision: string
      leaseToken: string
      attempt: number
      idempotencyKey: string
    }
    expect(claimed).toMatchObject({
      decision: 'execute',
      attempt: 1,
      idempotencyKey: 'agents/agent:run:refund',
    })
    const busy = await api.request('/v1/operations/claim', {
      method: 'POST',
      headers,
      body: JSON.stringify(claimBody),
    })
    expect(busy.status).toBe(409)
    const conflict = await api.request('/v1/operations/claim', {
      method: 'POST',
      headers,
      body: JSON.stringify({ ...claimBody, args: { amount: 90 } }),
    })
    expect(conflict.status).toBe(422)
    expect(await conflict.json()).toMatchObject({ error: { code: 'payload_conflict' } })
    const reported = await api.request(`/v1/operations/${encodeURIComponent('agent:run:refund')}/outcome`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        leaseToken: claimed.leaseToken,
        attempt: 1,
        outcome: 'success',
        result: { refund: 're_1' },
      }),
    })
    expect(await reported.json()).toMatchObject({ decision: 'completed', result: { refund: 're_1' } })
    const again = await api.request('/v1/operations/claim', {
      method: 'POST',
      headers,
      body: JSON.stringify(claimBody),
    })
    expect(await again.json()).toMatchObject({
      decision: 'completed',
      replayed: true,
      result: { refund: 're_1' },
    })
    const bad = await api.request('/v1/operations/claim', { method: 'POST', headers, body: '{"key":""}' })
    expect(bad.status).toBe(400)
    expect(await bad.json()).toMatchObject({ error: { code: 'invalid_request' } })
  })
})

describe('HTTP APIs: a compensable tool driven by an agent', () => {
  const token = 'c'.repeat(20)
  const api = () => app({ agentToken: token })
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
  const post = async (path: string, body: unknown) => {
    const response = await api().request(path, { method: 'POST', headers, body: JSON.stringify(body) })
    return { status: response.status, body: (await response.json()) as Record<string, unknown> }
  }
  type Claimed = { decision: string; leaseToken: string; attempt: number; idempotencyKey: string }
  const claimUntil = async (body: unknown, decision: string): Promise<Claimed> => {
    const deadline = Date.now() + 5000
    for (;;) {
      const answer = await post('/v1/operations/claim', body)
      if (answer.body.decision === decision) return answer.body as unknown as Claimed
      if (Date.now() > deadline) throw new Error(`no '${decision}' claim: ${JSON.stringify(answer.body)}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  it('records the undo before the call, undoes an unknown outcome, then retries under a new key', async () => {
    const key = 'agent:run-c:book'
    const path = `/v1/operations/${encodeURIComponent(key)}`
    const claimBody = { key, tool: 'book-room', effect: 'compensable', args: { room: 12 } }
    const first = await claimUntil(claimBody, 'execute')
    expect(first).toMatchObject({ attempt: 1, idempotencyKey: `agents/${key}`, undoRefRequired: true })

    // Reports that do not hold the operation change nothing.
    const stranger = await post(`${path}/undo-ref`, {
      leaseToken: '00000000-0000-4000-8000-000000000000',
      attempt: 1,
      undoRef: { cancel: 'bk_1' },
    })
    expect(stranger).toMatchObject({ status: 409, body: { error: { code: 'lease_lost' } } })
    const early = await post(`${path}/undo-outcome`, {
      leaseToken: first.leaseToken,
      attempt: 1,
      outcome: 'success',
    })
    expect(early).toMatchObject({ status: 409, body: { error: { code: 'attempt_mismatch' } } })

    const undoRef = await post(`${path}/undo-ref`, {
      leaseToken: first.leaseToken,
      attempt: 1,
      undoRef: { cancel: 'bk_1' },
    })
    expect(undoRef.status).toBe(200)
    const lost = await post(`${path}/outcome`, {
      leaseToken: first.leaseToken,
      attempt: 1,
      outcome: 'unknown',
      error: 'socket hang up',
    })
    expect(lost).toMatchObject({ status: 200, body: { decision: 'claim_again' } })

    // The unknown outcome with a recorded undo: the next claim hands out the undo, not a retry.
    const undo = await claimUntil(claimBody, 'undo')
    expect(undo).toMatchObject({ attempt: 1, undoRef: { cancel: 'bk_1' } })
    const undone = await post(`${path}/undo-outcome`, {
      leaseToken: undo.leaseToken,
      attempt: 1,
      outcome: 'success',
    })
    expect(undone).toMatchObject({ status: 200, body: { decision: 'claim_again' } })

    // Only after the undo committed: a second attempt, under a new idempotency key.
    const second = await claimUntil(claimBody, 'execute')
    expect(second).toMatchObject({ attempt: 2, idempotencyKey: `agents/${key}#2` })
    await post(`${path}/undo-ref`, { leaseToken: second.leaseToken, attempt: 2, undoRef: { cancel: 'bk_2' } })
    const done = await post(`${path}/outcome`, {
      leaseToken: second.leaseToken,
      attempt: 2,
      outcome: 'success',
      result: { booking: 'bk_2' },
    })
    expect(done).toMatchObject({ status: 200, body: { decision: 'completed', result: { booking: 'bk_2' } } })

    const view = await api().request(path, { headers })
    expect(await view.json()).toMatchObject({
      status: 'completed',
      attempts: [
        { attempt: 1, status: 'compensated' },
        { attempt: 2, status: 'succeeded' },
      ],
    })
    // Each attempt keeps its own undo reference: recording the second's left the first's alone.
    const undoRefs = await db.sql<Array<{ attempt: number; undo_ref: unknown }>>`
      select a.attempt, a.undo_ref from operation_attempts a join operations o on o.id = a.operation_id
      where o.operation_key = ${`agents/${key}`} order by a.attempt`
    expect(undoRefs).toEqual([
      { attempt: 1, undo_ref: { cancel: 'bk_1' } },
      { attempt: 2, undo_ref: { cancel: 'bk_2' } },
    ])
  })

  it('an unknown outcome without a recorded undo goes to reconciliation, never to a retry', async () => {
    const key = 'agent:run-d:book'
    const claimBody = { key, tool: 'book-room', effect: 'compensable', args: { room: 13 } }
    const first = await claimUntil(claimBody, 'execute')
    const lost = await post(`/v1/operations/${encodeURIComponent(key)}/outcome`, {
      leaseToken: first.leaseToken,
      attempt: 1,
      outcome: 'unknown',
      error: 'timeout',
    })
    expect(lost.body).toMatchObject({
      decision: 'escalated',
      status: 'needs_reconciliation',
      reason: 'unknown_without_undo_ref',
    })
  })
})

describe('hookledger approvals (CLI)', () => {
  it('lists, shows and decides an approval', async () => {
    const { approvalsCommand } = await import('../../src/cli/approvals.js')
    const { tool } = chargeTool('charge-cli', () => ({ kind: 'cannot_tell' }))
    const first = await ledger.invoke(tool, { key: 'order:cli:charge', args: { amount: 2 } })
    if (first.kind !== 'needs_reconciliation') throw new Error(first.kind)
    const escalated = await reconcileOperation({ db: db.db, ledger, logger }, first.operationId)
    if (escalated.kind !== 'escalated') throw new Error(escalated.kind)
    const lines: string[] = []
    const out = (line: string) => void lines.push(line)
    expect(await approvalsCommand(['list'], async () => db.url, out)).toBe(0)
    expect(lines.join('\n')).toContain(
      `${escalated.approvalId}  pending  charge-cli (irreversible)  order:cli:charge`,
    )
    expect(await approvalsCommand(['show', escalated.approvalId], async () => db.url, out)).toBe(0)
    expect(lines.at(-1)).toContain('"proposedAction": "investigate"')
    await expect(
      approvalsCommand(
        ['decide', escalated.approvalId, '--decision', 'retry', '--by', 'dee'],
        async () => db.url,
        out,
      ),
    ).rejects.toThrow(/payload hash/)
    const args = [
      'decide',
      escalated.approvalId,
      '--decision',
      'abandon',
      '--by',
      'dee',
      '--note',
      'customer cancelled',
    ]
    expect(await approvalsCommand(args, async () => db.url, out)).toBe(0)
    expect(lines.at(-1)).toBe('order:cli:charge: abandon recorded; the operation is now abandoned')
  })
})
