import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboundSettingsSchema } from '../../src/config/outbound.js'
import { createClaimBatcher } from '../../src/db/claims.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createApp } from '../../src/http/app.js'
import { createLogger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { decide } from '../../src/outbound/approvals.js'
import { createOutboundLedger } from '../../src/outbound/ledger.js'
import { reconcileOperation } from '../../src/outbound/reconcile.js'
import { defineTool } from '../../src/outbound/tools.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

// One state machine for both sides of the guard: a tool run in process and the same tool driven by
// an agent over HTTP get the same attempts and the same delays.

let db: TestDatabase
const logger = createLogger('silent')
const settings = outboundSettingsSchema.parse({
  leaseMs: 2000,
  maxAttempts: 4,
  backoffBaseMs: 5,
  backoffMaxMs: 1000,
  reconcileDelayMs: 0,
  tools: { 'configured-quote': { maxAttempts: 2, backoffBaseMs: 40 } },
})
const calls: number[] = []
const flaky = defineTool<{ n: number }, string>({
  name: 'flaky-quote',
  effect: 'idempotent',
  retry: { attempts: 2, baseDelayMs: 40, maxDelayMs: 100 },
  async execute() {
    calls.push(Date.now())
    throw new Error('socket hang up')
  },
})
let ledger: ReturnType<typeof createOutboundLedger>

beforeAll(async () => {
  db = await createTestDatabase()
  ledger = createOutboundLedger({ db: db.db, logger, settings, tools: [flaky as never] })
})
afterAll(async () => {
  await db.drop()
})

const token = 'd'.repeat(20)
const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
function api() {
  return createApp({
    config: buildConfig({ sources: [] }, () => undefined),
    db: db.db,
    claims: createClaimBatcher(db.sql),
    enqueuer: createEnqueuer({ queue: undefined as never, sql: db.sql, logger, failpoints: noFailpoints }),
    logger,
    metrics: createMetrics(),
    readiness: [],
    outbound: ledger,
    agentToken: token,
  })
}
async function post(path: string, body: unknown) {
  const response = await api().request(path, { method: 'POST', headers, body: JSON.stringify(body) })
  return (await response.json()) as Record<string, unknown>
}

/** Drives one operation as an agent whose every call loses its response; returns the answers. */
async function agentLosingEveryResponse(tool: string, key: string) {
  const delays: number[] = []
  const attempts: number[] = []
  for (let round = 0; round < 10; round += 1) {
    const claim = await post('/v1/operations/claim', { key, tool, effect: 'idempotent', args: { n: 1 } })
    if (claim.decision !== 'execute') throw new Error(`expected execute, got ${JSON.stringify(claim)}`)
    attempts.push(claim.attempt as number)
    const answer = await post(`/v1/operations/${encodeURIComponent(key)}/outcome`, {
      leaseToken: claim.leaseToken,
      attempt: claim.attempt,
      outcome: 'unknown',
      error: 'socket hang up',
    })
    if (answer.decision !== 'claim_again') return { attempts, delays, final: answer }
    delays.push(answer.retryAfterMs as number)
    await new Promise((resolve) => setTimeout(resolve, (answer.retryAfterMs as number) + 20))
  }
  throw new Error('the agent was never told to stop')
}

describe('one state machine for in-process tools and agents over HTTP', () => {
  it("an agent gets the tool's own attempts and delays, as invoke does", async () => {
    const inProcess = await ledger.invoke(flaky, { key: 'machine:in-process', args: { n: 1 } })
    expect(inProcess).toMatchObject({ kind: 'exhausted', attempts: 2 })
    expect(calls).toHaveLength(2)
    expect((calls[1] ?? 0) - (calls[0] ?? 0)).toBeGreaterThanOrEqual(38)

    const agent = await agentLosingEveryResponse('flaky-quote', 'machine:agent')
    expect(agent.attempts).toEqual([1, 2])
    expect(agent.delays).toEqual([40])
    expect(agent.final).toMatchObject({ decision: 'exhausted', attempts: 2 })
  })

  it('a tool only agents call takes its retry from outbound.tools in the config', async () => {
    const agent = await agentLosingEveryResponse('configured-quote', 'machine:configured')
    expect(agent.attempts).toEqual([1, 2])
    expect(agent.delays).toEqual([40])
    expect(agent.final).toMatchObject({ decision: 'exhausted', attempts: 2 })
  })

  it("keeps the state machine's internal steps out of the ledger's public surface", () => {
    expect(Object.keys(ledger).sort()).toEqual([
      'compensate',
      'db',
      'invoke',
      'register',
      'settings',
      'tool',
      'waitFor',
    ])
  })
})

describe('escalated answers', () => {
  it('carry the same reason code on the first escalation and on every later claim', async () => {
    const key = 'machine:irreversible'
    const body = { key, tool: 'send-gift', effect: 'irreversible', args: { n: 1 } }
    const claim = await post('/v1/operations/claim', body)
    const first = await post(`/v1/operations/${encodeURIComponent(key)}/outcome`, {
      leaseToken: claim.leaseToken,
      attempt: claim.attempt,
      outcome: 'unknown',
      error: 'the courier API timed out',
    })
    expect(first).toMatchObject({ decision: 'escalated', reason: 'unknown_outcome' })
    expect(await post('/v1/operations/claim', body)).toMatchObject({
      decision: 'escalated',
      status: 'needs_reconciliation',
      reason: 'unknown_outcome',
    })
  })
})

describe('approvals', () => {
  it('record_success refuses empty evidence', async () => {
    const lost = defineTool<{ n: number }, string>({
      name: 'lost-charge',
      effect: 'irreversible',
      async execute() {
        throw new Error('socket hang up')
      },
    })
    const first = await ledger.invoke(lost, { key: 'machine:charge', args: { n: 1 } })
    if (first.kind !== 'needs_reconciliation') throw new Error(first.kind)
    const escalated = await reconcileOperation({ db: db.db, ledger, logger }, first.operationId)
    if (escalated.kind !== 'escalated') throw new Error(escalated.kind)
    for (const evidence of [{}, [], '  ']) {
      const outcome = await decide(db.db, {
        approvalId: escalated.approvalId,
        decision: 'record_success',
        by: 'cy',
        evidence,
      })
      expect(outcome).toMatchObject({ kind: 'invalid' })
    }
  })
})
