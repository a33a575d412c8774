import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { evidenceFor } from '../../src/db/evidence.js'
import { createLogger } from '../../src/logger.js'
import { settleFromEvidence } from '../../src/outbound/evidence.js'
import { httpTool } from '../../src/outbound/http-tool.js'
import { createOutboundLedger } from '../../src/outbound/ledger.js'
import { defineTool } from '../../src/outbound/tools.js'
import { MAX_WAIT_MS } from '../../src/outbound/wait.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase } from '../support/database.js'
import { type MockPayments, startMockPayments } from '../support/mock-payments.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'

// The source document's hardest case, end to end: the charge commits, its answer is lost, and the
// provider's own signed webhook says what happened, in either order. Exactly one charge each time.

const STRIPE_SECRET = 'whsec_closing_the_loop_test_secret'
const AGENT_TOKEN = 'agent-token-closing-the-loop'

let hookledger: TestService
let payments: MockPayments
let charge: ReturnType<typeof httpTool>

beforeAll(async () => {
  const config = buildConfig(
    {
      sources: [
        {
          id: 'stripe',
          verify: { scheme: 'stripe', secrets: [STRIPE_SECRET] },
          // No handler: the source exists to settle operations.
          evidence: [
            {
              eventTypes: ['charge.succeeded', 'charge.failed'],
              operationKey: '/data/object/metadata/hookledger_key',
              downstreamId: '/data/object/id',
              failure: { pointer: '/data/object/failure_code' },
              // The in-process charge tool, and the agents' charges under their prefix.
              settles: { tools: ['charge', 'agent-charge'], keyPrefixes: ['order:', 'agents/order:'] },
            },
          ],
        },
      ],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
      outbound: {
        leaseMs: 2000,
        backoffMaxMs: 200,
        reconcileDelayMs: 300,
        sweepIntervalMs: 200,
        allowHosts: ['127.0.0.1'],
      },
    },
    () => undefined,
  )
  // The webhook URL is known only once the service listens; the provider is started after it.
  let webhookUrl = ''
  charge = httpTool({
    name: 'charge',
    method: 'POST',
    effect: 'irreversible',
    url: 'http://127.0.0.1:1/unset', // replaced per call below (args.url), allow-listed
    operationKeyAt: { body: '/metadata/hookledger_key' },
    timeoutMs: 5000,
  })
  hookledger = await startTestService({ config, tools: [charge as never], env: { AGENT_TOKEN } })
  webhookUrl = `${hookledger.url}/webhooks/stripe`
  payments = await startMockPayments({ webhookUrl, secret: STRIPE_SECRET })
})
afterAll(async () => {
  await hookledger?.close()
  await payments?.close()
})

const ledger = () => hookledger.service.outbound
const invokeCharge = (key: string, amount: number) =>
  ledger().invoke(charge, { key, args: { url: `${payments.url}/v1/charges`, body: { amount } } })

async function pendingApprovals(key: string): Promise<number> {
  const [row] = await hookledger.database.sql<Array<{ n: number }>>`
    select count(*)::int as n from approvals a join operations o on o.id = a.operation_id
    where o.operation_key = ${key} and a.status = 'pending'`
  return row?.n ?? -1
}

async function audit(key: string) {
  return hookledger.database.sql<
    Array<{ event: string; from_status: string; to_status: string; actor: string; note: string }>
  >`select event, from_status, to_status, actor, details->>'note' as note
    from operation_audit where operation_key = ${key} order by id`
}

async function eventStatus(eventId: string): Promise<string | undefined> {
  const [row] = await hookledger.database.sql<Array<{ status: string }>>`
    select status::text from inbound_events where source = 'stripe' and event_id = ${eventId}`
  return row?.status
}

async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  for (let i = 0; i < 200; i += 1) {
    const value = await read()
    if (done(value)) return value
    await sleep(100)
  }
  throw new Error(`timed out waiting for ${what}`)
}

function chargesFor(key: string) {
  return payments.charges.filter((c) => c.metadata.hookledger_key === key)
}

describe('an inbound event settles an outbound operation whose outcome is unknown', () => {
  it('lost response first: needs_reconciliation, an approval, then the webhook completes it with one charge', async () => {
    const key = 'order:1001:charge'
    payments.loseNextResponse()
    const first = await invokeCharge(key, 500)
    expect(first.kind).toBe('needs_reconciliation')
    // The tool has no reconcile: the reconciler asks a person, as the decision table says.
    const escalated = await ledger().waitFor(key, { timeoutMs: 15_000, from: 'needs_reconciliation' })
    expect(escalated).toMatchObject({ kind: 'changed', op: { status: 'awaiting_approval' } })
    expect(await pendingApprovals(key)).toBe(1)

    // The workflow waits in process while the provider's webhook arrives.
    const waiting = ledger().waitFor(key, { timeoutMs: 30_000, from: 'awaiting_approval' })
    const [made] = chargesFor(key)
    if (made === undefined) throw new Error('no charge was made')
    const sent = await payments.sendEvent(made, 'charge.succeeded')
    expect(sent.status).toBe(200)
    const answer = await waiting
    expect(answer).toMatchObject({ kind: 'changed', op: { status: 'completed', downstreamId: made.id } })
    if (answer.kind !== 'changed') throw new Error('no change')
    expect(answer.op.resultJson).toMatchObject({
      settledBy: 'event',
      source: 'stripe',
      eventId: sent.eventId,
    })

    expect(await pendingApprovals(key)).toBe(0)
    const note = `reconciled by event stripe/${sent.eventId}`
    expect(await audit(key)).toContainEqual(
      expect.objectContaining({
        event: 'reconciled_by_event',
        from_status: 'awaiting_approval',
        to_status: 'completed',
        note,
      }),
    )
    const [decided] = await hookledger.database.sql<Array<{ decision: string; decided_by: string }>>`
      select a.decision, a.decided_by from approvals a join operations o on o.id = a.operation_id
      where o.operation_key = ${key}`
    expect(decided).toEqual({ decision: 'record_success', decided_by: `event:stripe/${sent.eventId}` })

    const again = await invokeCharge(key, 500)
    expect(again).toMatchObject({ kind: 'completed', replayed: true, downstreamId: made.id })
    expect(chargesFor(key)).toHaveLength(1)
    expect(await eventStatus(sent.eventId)).toBe('done')
  })

  it('webhook first: the event is kept while the call runs and settles it the moment the answer is lost', async () => {
    const key = 'order:1002:charge'
    let evidenceWhileCalling: string | undefined
    payments.loseNextResponse(async (made) => {
      // The provider's webhook goes out and is fully processed before the API's answer is lost.
      const sent = await payments.sendEvent(made, 'charge.succeeded')
      expect(sent.status).toBe(200)
      await until(
        'the event to be processed',
        () => eventStatus(sent.eventId),
        (s) => s === 'done',
      )
      const [kept] = await evidenceFor(hookledger.database.sql, key)
      evidenceWhileCalling = kept?.status
    })
    const first = await invokeCharge(key, 700)
    expect(evidenceWhileCalling).toBe('pending')
    const [made] = chargesFor(key)
    expect(first).toMatchObject({ kind: 'completed', replayed: false, downstreamId: made?.id })
    expect(await audit(key)).toContainEqual(
      expect.objectContaining({
        event: 'reconciled_by_event',
        from_status: 'in_progress',
        to_status: 'completed',
      }),
    )
    expect(await pendingApprovals(key)).toBe(0)
    expect((await evidenceFor(hookledger.database.sql, key)).map((e) => e.status)).toEqual(['applied'])

    const again = await invokeCharge(key, 700)
    expect(again).toMatchObject({ kind: 'completed', replayed: true, downstreamId: made?.id })
    expect(chargesFor(key)).toHaveLength(1)
  })

  it('a failure event settles it as definitely not happened, and nothing runs again', async () => {
    const key = 'order:1003:charge'
    payments.declineNext()
    payments.loseNextResponse()
    expect((await invokeCharge(key, 900)).kind).toBe('needs_reconciliation')
    const [declined] = chargesFor(key)
    if (declined === undefined) throw new Error('no charge request was recorded')
    const sent = await payments.sendEvent(declined, 'charge.failed')
    expect(sent.status).toBe(200)
    const settled = await ledger().waitFor(key, { timeoutMs: 15_000, from: 'needs_reconciliation' })
    // Whether the reconciler escalated first or not, the event ends it as failed.
    const final =
      settled.kind === 'changed' && settled.op.status === 'awaiting_approval'
        ? await ledger().waitFor(key, { timeoutMs: 15_000, from: 'awaiting_approval' })
        : settled
    expect(final).toMatchObject({ kind: 'changed', op: { status: 'failed' } })
    expect(await pendingApprovals(key)).toBe(0)
    const again = await invokeCharge(key, 900)
    expect(again).toMatchObject({ kind: 'failed', reason: 'rejected' })
    if (again.kind === 'failed') expect(again.error).toContain(`reconciled by event stripe/${sent.eventId}`)
    expect(chargesFor(key)).toHaveLength(1)
  })

  it('a crashed caller: evidence kept under a live lease is applied by the sweep once the lease runs out', async () => {
    const key = 'order:1004:charge'
    const api = (path: string, body: unknown) =>
      fetch(`${hookledger.url}/v1/operations${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
    // An agent claims, the charge lands, and the agent dies without reporting.
    const claimed = await api('/claim', {
      key,
      tool: 'agent-charge',
      effect: 'irreversible',
      args: { amount: 3 },
    })
    const claim = (await claimed.json()) as { decision: string; ledgerKey: string }
    expect(claim).toMatchObject({ decision: 'execute', ledgerKey: `agents/${key}` })
    // The agent puts the ledger key where the provider echoes it, as httpTool does in process.
    const ledgerKey = claim.ledgerKey
    const made = { id: 'ch_agent_1', amount: 3, metadata: { hookledger_key: ledgerKey }, declined: false }
    const sent = await payments.sendEvent(made, 'charge.succeeded')
    expect(sent.status).toBe(200)
    await until(
      'the event to be processed',
      () => eventStatus(sent.eventId),
      (s) => s === 'done',
    )
    expect((await evidenceFor(hookledger.database.sql, ledgerKey)).map((e) => e.status)).toEqual(['pending'])
    const settled = await ledger().waitFor(ledgerKey, { timeoutMs: 15_000, from: 'in_progress' })
    expect(settled).toMatchObject({
      kind: 'changed',
      op: { status: 'completed', downstreamId: 'ch_agent_1' },
    })
    const [attempt] = await hookledger.database.sql<Array<{ status: string }>>`
      select a.status::text from operation_attempts a join operations o on o.id = a.operation_id
      where o.operation_key = ${ledgerKey}`
    expect(attempt?.status).toBe('succeeded')
  })

  it("an agent's unknown report is answered completed when the event came first", async () => {
    const key = 'order:1006:charge'
    const api = async (path: string, body: unknown) => {
      const response = await fetch(`${hookledger.url}/v1/operations${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      return (await response.json()) as Record<string, unknown>
    }
    const claimed = await api('/claim', {
      key,
      tool: 'agent-charge',
      effect: 'irreversible',
      args: { amount: 4 },
    })
    expect(claimed.decision).toBe('execute')
    const made = {
      id: 'ch_agent_2',
      amount: 4,
      metadata: { hookledger_key: String(claimed.ledgerKey) },
      declined: false,
    }
    const sent = await payments.sendEvent(made, 'charge.succeeded')
    await until(
      'the event to be processed',
      () => eventStatus(sent.eventId),
      (s) => s === 'done',
    )
    const reported = await api(`/${encodeURIComponent(key)}/outcome`, {
      leaseToken: claimed.leaseToken,
      attempt: claimed.attempt,
      outcome: 'unknown',
      error: 'socket hang up',
    })
    expect(reported).toMatchObject({ decision: 'completed', downstreamId: 'ch_agent_2', replayed: false })
  })

  it('an event for an operation that settled otherwise is closed as superseded and changes nothing', async () => {
    const key = 'order:1005:charge'
    const first = await invokeCharge(key, 100)
    expect(first.kind).toBe('completed')
    const [made] = chargesFor(key)
    if (made === undefined) throw new Error('no charge')
    const sent = await payments.sendEvent({ ...made, declined: true }, 'charge.failed')
    expect(sent.status).toBe(200)
    await until(
      'the evidence to be closed',
      () => evidenceFor(hookledger.database.sql, key),
      (rows) => rows[0]?.status === 'superseded',
    )
    expect(await invokeCharge(key, 100)).toMatchObject({ kind: 'completed', replayed: true })
    expect((await audit(key)).map((a) => a.event)).not.toContain('reconciled_by_event')
  })

  it('an event of an evidence type without a key is processed and kept as nothing', async () => {
    const made = { id: 'ch_dashboard', amount: 1, metadata: {}, declined: false }
    const sent = await payments.sendEvent(made, 'charge.succeeded')
    expect(sent.status).toBe(200)
    await until(
      'the event to be processed',
      () => eventStatus(sent.eventId),
      (s) => s === 'done',
    )
    const [row] = await hookledger.database.sql<Array<{ n: number }>>`
      select count(*)::int as n from operation_evidence where event_id = ${sent.eventId}`
    expect(row?.n).toBe(0)
  })
})

describe('waiting for an operation', () => {
  const get = (path: string) =>
    fetch(`${hookledger.url}/v1/operations/${path}`, { headers: { authorization: `Bearer ${AGENT_TOKEN}` } })

  it('a wait that sees no change ends with changed: false at its time', async () => {
    const key = 'order:2001:charge'
    const claimed = await fetch(`${hookledger.url}/v1/operations/claim`, {
      method: 'POST',
      headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ key, tool: 'agent-charge', effect: 'irreversible', args: { amount: 1 } }),
    })
    const { leaseToken, attempt } = (await claimed.json()) as { leaseToken: string; attempt: number }
    const reported = await fetch(`${hookledger.url}/v1/operations/${encodeURIComponent(key)}/outcome`, {
      method: 'POST',
      headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ leaseToken, attempt, outcome: 'success', result: { id: 'ch_wait' } }),
    })
    expect(reported.status).toBe(200)
    const answer = await get(`${encodeURIComponent(key)}?wait=300ms`)
    expect(answer.status).toBe(200)
    expect(await answer.json()).toMatchObject({ status: 'completed', changed: false })
    // A status other than the current one: the change is already there, answered at once.
    const seen = await get(`${encodeURIComponent(key)}?wait=30s&status=in_progress`)
    expect(await seen.json()).toMatchObject({ status: 'completed', changed: true })
  })

  it('refuses waits over the bound, malformed waits and unknown statuses; an unknown key is 404', async () => {
    const over = await get(`any?wait=${MAX_WAIT_MS / 1000 + 1}s`)
    expect(over.status).toBe(400)
    expect(await over.json()).toMatchObject({ error: { code: 'invalid_wait' } })
    for (const query of ['wait=soon', 'wait=-1s', 'wait=5s&status=done', 'status=completed']) {
      const answer = await get(`any?${query}`)
      expect(answer.status, query).toBe(400)
      expect(await answer.json()).toMatchObject({ error: { code: 'invalid_wait' } })
    }
    expect((await get('no-such-key?wait=1s')).status).toBe(404)
    await expect(ledger().waitFor('x', { timeoutMs: MAX_WAIT_MS + 1 })).rejects.toThrow(RangeError)
  })
})

describe('exactly once', () => {
  it('applies one piece of evidence once, however many appliers race for it', async () => {
    // A ledger of its own, with no reconciler or sweep: only the appliers below race.
    const database = await createTestDatabase()
    try {
      const own = createOutboundLedger({ db: database.db, logger: createLogger('silent') })
      const lost = defineTool<{ amount: number }, never>({
        name: 'charge-lost',
        effect: 'irreversible',
        execute: async () => {
          throw new Error('socket hang up')
        },
      })
      const key = 'order:3001:charge'
      for (let round = 0; round < 5; round += 1) {
        const roundKey = `${key}:${round}`
        expect((await own.invoke(lost, { key: roundKey, args: { amount: 1 } })).kind).toBe(
          'needs_reconciliation',
        )
        await database.sql`
          insert into operation_evidence
            (source, event_id, event_type, event_row_id, operation_key, outcome, downstream_id,
              settles_tools, event_received_at)
          values ('stripe', ${`evt_race_${round}`}, 'charge.succeeded', gen_random_uuid(), ${roundKey},
            'succeeded', 'ch_race', ${['charge-lost']}, now())`
        const applied = await Promise.all(
          Array.from({ length: 8 }, () => settleFromEvidence(database.db, { key: roundKey })),
        )
        expect(applied.filter((op) => op !== undefined)).toHaveLength(1)
        const [audited] = await database.sql<Array<{ n: number }>>`
          select count(*)::int as n from operation_audit
          where operation_key = ${roundKey} and event = 'reconciled_by_event'`
        expect(audited?.n).toBe(1)
      }
    } finally {
      await database.drop()
    }
  })
})

describe('httpTool puts the operation key where the provider echoes it', () => {
  it('in a header, in the body at a pointer (objects made on the way), and refuses a body with no object there', async () => {
    const seen: Array<{ headers: Record<string, unknown>; body: unknown }> = []
    const server = createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (chunk: Buffer) => chunks.push(chunk))
      req.on('end', () => {
        seen.push({
          headers: req.headers,
          body: JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null'),
        })
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const database = await createTestDatabase()
    try {
      const { port } = server.address() as AddressInfo
      const own = createOutboundLedger({ db: database.db, logger: createLogger('silent') })
      const tool = httpTool({
        name: 'echoed',
        method: 'POST',
        effect: 'idempotent',
        url: `http://127.0.0.1:${port}/orders`,
        operationKeyAt: { body: '/metadata/hookledger_key', header: 'X-Reference' },
      })
      const done = await own.invoke(tool, { key: 'order:4001:create', args: { body: { amount: 5 } } })
      expect(done.kind).toBe('completed')
      expect(seen[0]?.headers['x-reference']).toBe('order:4001:create')
      expect(seen[0]?.body).toEqual({ amount: 5, metadata: { hookledger_key: 'order:4001:create' } })
      const refused = await own.invoke(tool, { key: 'order:4002:create', args: { body: [1, 2] } })
      expect(refused).toMatchObject({ kind: 'failed', reason: 'rejected' })
      expect(seen).toHaveLength(1)
      expect(() =>
        httpTool({ method: 'POST', effect: 'idempotent', operationKeyAt: { body: 'metadata.key' } }),
      ).toThrow(TypeError)
    } finally {
      server.close()
      await database.drop()
    }
  })
})
