import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { evidenceFor } from '../../src/db/evidence.js'
import { defineTool } from '../../src/outbound/tools.js'
import { buildConfig } from '../../src/service/config.js'
import { signDelivery } from '../../src/testing.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// Attacks on the ledger by callers who hold only an agent token or only a correctly signed event
// (README "Trust model"): none of them may complete, fail, read or silence what is not theirs.

const AGENT_TOKEN = 'agent-token-trust-boundaries'
const BILLING_TOKEN = 'billing-token-trust-boundaries'
const SUPPORT_TOKEN = 'support-token-trust-boundaries'
const STRIPE_SECRET = 'whsec_trust_boundaries_stripe'
const SHOP_SECRET = 'whsec_trust_boundaries_shop'

let hookledger: TestService
let sink: Awaited<ReturnType<typeof startSink>>
let deadSink: Awaited<ReturnType<typeof startSink>>

beforeAll(async () => {
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  // A destination that is down for good: its route's deliveries run out of attempts.
  deadSink = await startSink(() => ({ status: 503 }))
  const lookup = (name: string) =>
    ({ BILLING_AGENT_TOKEN: BILLING_TOKEN, SUPPORT_AGENT_TOKEN: SUPPORT_TOKEN })[name]
  const config = buildConfig(
    {
      sources: [
        {
          id: 'live',
          verify: { scheme: 'standard-webhooks', secrets: ['env:NONE'] },
          handler: { type: 'forward', url: sink.url, timeoutMs: 1000 },
        },
        {
          id: 'routed',
          verify: { scheme: 'standard-webhooks', secrets: ['env:NONE'] },
          routes: [{ id: 'main', forward: { url: sink.url, timeoutMs: 1000 } }],
        },
        {
          id: 'dead',
          verify: { scheme: 'standard-webhooks', secrets: ['env:NONE'] },
          routes: [{ id: 'main', forward: { url: deadSink.url, timeoutMs: 1000 } }],
        },
        {
          id: 'stripe',
          verify: { scheme: 'stripe', secrets: [STRIPE_SECRET] },
          evidence: [
            {
              eventTypes: ['charge.succeeded', 'charge.failed'],
              operationKey: '/data/object/metadata/hookledger_key',
              failure: { pointer: '/data/object/failure_code' },
              settles: { tools: ['stripe.charge'], keyPrefixes: ['order_', 'agents/order_'] },
            },
            {
              // A careless scope that covers a source's route keys: evidence still never settles them.
              eventTypes: ['forward.done'],
              operationKey: '/data/object/metadata/hookledger_key',
              settles: { keyPrefixes: ['dead:'] },
            },
          ],
        },
        {
          id: 'shop',
          verify: { scheme: 'stripe', secrets: [SHOP_SECRET] },
          evidence: [
            {
              eventTypes: ['refund.failed'],
              operationKey: '/data/object/metadata/hookledger_key',
              failure: { pointer: '/data/object/failure_code' },
              settles: { tools: ['shop.refund'] },
            },
          ],
        },
      ],
      agents: {
        tokens: [
          {
            name: 'billing',
            token: 'env:BILLING_AGENT_TOKEN',
            keyPrefixes: ['billing:'],
            tools: ['stripe.refund'],
          },
          { name: 'support', token: 'env:SUPPORT_AGENT_TOKEN', keyPrefixes: ['support:'] },
        ],
      },
      worker: { ...FAST_WORKER, maxAttempts: 2 },
      relay: FAST_RELAY,
      outbound: { leaseMs: 2000, backoffMaxMs: 200, reconcileDelayMs: 60_000, sweepIntervalMs: 200 },
    },
    (name) => (name === 'NONE' ? 'whsec_dGVzdC1zZWNyZXQtZm9yLWhvb2tsZWRnZXItdGVzdHM=' : lookup(name)),
  )
  hookledger = await startTestService({ config, env: { AGENT_TOKEN } })
})

afterAll(async () => {
  await hookledger?.close()
  await sink?.close()
  await deadSink?.close()
})

const agent = (token: string) => async (method: 'GET' | 'POST', path: string, body?: unknown) => {
  const response = await fetch(`${hookledger.url}/v1/operations${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}
const anyAgent = agent(AGENT_TOKEN)
const billing = agent(BILLING_TOKEN)
const support = agent(SUPPORT_TOKEN)

/** Claims and reports success, as an agent that wants the key to look done. */
async function claimAndSucceed(call: ReturnType<typeof agent>, key: string, tool: string, args: unknown) {
  const claimed = await call('POST', '/claim', { key, tool, effect: 'idempotent', args })
  expect(claimed.body).toMatchObject({ decision: 'execute' })
  const reported = await call('POST', `/${encodeURIComponent(key)}/outcome`, {
    leaseToken: claimed.body.leaseToken,
    attempt: claimed.body.attempt,
    outcome: 'success',
    result: { pretend: true },
  })
  expect(reported.body).toMatchObject({ decision: 'completed' })
}

async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  for (let i = 0; i < 150; i += 1) {
    const value = await read()
    if (done(value)) return value
    await sleep(100)
  }
  throw new Error(`timed out waiting for ${what}`)
}

async function eventStatus(source: string, eventId: string): Promise<string | undefined> {
  const [row] = await hookledger.database.sql<Array<{ status: string }>>`
    select status::text from inbound_events where source = ${source} and event_id = ${eventId}`
  return row?.status
}

async function operation(key: string) {
  const [row] = await hookledger.database.sql<Array<{ status: string; tool: string }>>`
    select status::text, tool from operations where operation_key = ${key}`
  return row
}

/** A provider's signed event naming `key` where it echoes the operation key. */
async function sendEvidence(source: 'stripe' | 'shop', type: string, key: string, failureCode?: string) {
  const eventId = `evt_${Math.random().toString(36).slice(2)}`
  const body = JSON.stringify({
    id: eventId,
    type,
    data: {
      object: { id: `ch_${eventId}`, metadata: { hookledger_key: key }, failure_code: failureCode ?? null },
    },
  })
  const secret = source === 'stripe' ? STRIPE_SECRET : SHOP_SECRET
  const response = await fetch(`${hookledger.url}/webhooks/${source}`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...signDelivery('stripe', secret, body) },
  })
  expect(response.status).toBe(200)
  await until(
    'the evidence event to be processed',
    () => eventStatus(source, eventId),
    (status) => status === 'done',
  )
  return eventId
}

/** An in-process charge whose answer is always lost: its outcome stays unknown. */
const lostCharge = defineTool<{ amount: number }, never>({
  name: 'stripe.charge',
  effect: 'irreversible',
  execute: async () => ({ kind: 'unknown', error: 'socket hang up' }),
})

describe("the agents' API reaches only the agents' space", () => {
  it('a pre-claimed delivery key silences nothing: the destination gets each event once, and its answer is unreadable', async () => {
    const deliver = async (source: string, eventId: string) => {
      const body = JSON.stringify({ type: 'order.created', id: eventId })
      const answer = await fetch(`${hookledger.url}/webhooks/${source}`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: eventId }),
      })
      expect(answer.status).toBe(200)
      await until(
        'the event to be done',
        () => eventStatus(source, eventId),
        (status) => status === 'done' || status === 'failed',
      )
      return body
    }
    const bodySha256 = (eventId: string) =>
      createHash('sha256')
        .update(JSON.stringify({ type: 'order.created', id: eventId }))
        .digest('hex')
    // The attacker predicts a delivery's key and arguments and claims it first, reporting success
    // (a route's delivery, which is the service's own operation; a source's own forward, which has
    // none but whose key an earlier version used)...
    const attacks = [
      {
        source: 'routed',
        eventId: 'msg_preclaimed_route',
        key: 'routed:msg_preclaimed_route:route:main',
        service: 'completed',
      },
      {
        source: 'live',
        eventId: 'msg_preclaimed_forward',
        key: 'live:msg_preclaimed_forward:forward',
        service: undefined,
      },
      // ...or claims one with other arguments, which used to make the event FAILED.
      {
        source: 'routed',
        eventId: 'msg_preclaimed_other_args',
        key: 'routed:msg_preclaimed_other_args:route:main',
        service: 'completed',
        other: true,
      },
    ]
    for (const attack of attacks) {
      await claimAndSucceed(
        anyAgent,
        attack.key,
        'forward',
        attack.other === true
          ? { other: true }
          : { source: attack.source, eventId: attack.eventId, bodySha256: bodySha256(attack.eventId) },
      )
    }

    for (const attack of attacks) {
      const body = await deliver(attack.source, attack.eventId)
      expect(await eventStatus(attack.source, attack.eventId)).toBe('done')
      expect(sink.received.filter((r) => r.body === body)).toHaveLength(1)
      // The service's delivery is its own operation (a route's), or none (a source's own forward,
      // whose event's row is its record); the agent's operation is another, in the agents' space.
      const ours = await operation(attack.key)
      if (attack.service === undefined) expect(ours).toBeUndefined()
      else expect(ours).toMatchObject({ status: attack.service, tool: 'forward' })
      expect(await operation(`agents/${attack.key}`)).toMatchObject({ status: 'completed' })
      // Reading through the agents' API finds only the agent's own operation, never the destination's answer.
      const read = await anyAgent('GET', `/${encodeURIComponent(attack.key)}`)
      expect(read.body).toMatchObject({
        key: attack.key,
        ledgerKey: `agents/${attack.key}`,
        result: { pretend: true },
      })
    }
  })

  it("a pre-claimed alert key leaves the alert's own operation to be sent", async () => {
    const service = hookledger.service.outbound
    const alertKey = 'alerts:ops:event_failed:live:1796000000000:send'
    await claimAndSucceed(anyAgent, alertKey, 'alert.webhook', { channel: 'ops' })
    const sent: string[] = []
    const alert = defineTool<{ channel: string }, { status: number }>({
      name: 'alert.webhook',
      effect: 'idempotent',
      execute: async (_args, ctx) => {
        sent.push(ctx.key)
        return { kind: 'success', result: { status: 200 } }
      },
    })
    const outcome = await service.invoke(alert, { key: alertKey, args: { channel: 'ops' } })
    expect(outcome).toMatchObject({ kind: 'completed', replayed: false })
    expect(sent).toEqual([alertKey])
    // And in-process code cannot reach into the agents' space either.
    await expect(
      service.invoke(alert, { key: `agents/${alertKey}`, args: { channel: 'ops' } }),
    ).rejects.toThrow(/belong to the agents' API/)
  })

  it('a token reaches only its prefixes and tools: 403 outside them, 404 for an operation of another tool', async () => {
    const outside = await billing('POST', '/claim', {
      key: 'support:1',
      tool: 'stripe.refund',
      effect: 'idempotent',
      args: 1,
    })
    expect(outside.status).toBe(403)
    expect(outside.body).toMatchObject({ error: { code: 'key_out_of_scope' } })
    expect(String((outside.body.error as { message: string }).message)).toContain("'billing:'")

    const tool = await billing('POST', '/claim', {
      key: 'billing:1',
      tool: 'stripe.charge',
      effect: 'idempotent',
      args: 1,
    })
    expect(tool.status).toBe(403)
    expect(tool.body).toMatchObject({ error: { code: 'tool_out_of_scope' } })

    await claimAndSucceed(support, 'support:ticket-9:mail', 'mail.send', { to: 'a@example.com' })
    const [audit] = await hookledger.database.sql<Array<{ actor: string }>>`
      select actor from operation_audit where operation_key = 'agents/support:ticket-9:mail' and event = 'claimed'`
    expect(audit?.actor).toBe('agent:support')
    // Another token's scope: refused by key, whether or not it exists.
    for (const key of ['support:ticket-9:mail', 'support:no-such-key']) {
      const read = await billing('GET', `/${encodeURIComponent(key)}`)
      expect(read.status, key).toBe(403)
      expect(read.body).toMatchObject({ error: { code: 'key_out_of_scope' } })
    }
    // AGENT_TOKEN keeps the whole agents' space, as documented.
    expect((await anyAgent('GET', `/${encodeURIComponent('support:ticket-9:mail')}`)).status).toBe(200)

    // In billing's prefix but of a tool billing may not use: to billing it does not exist.
    await claimAndSucceed(anyAgent, 'billing:2', 'ledger.adjust', { amount: 1 })
    const hidden = await billing('GET', `/${encodeURIComponent('billing:2')}`)
    expect(hidden.status).toBe(404)
    expect(hidden.body).toMatchObject({ error: { code: 'operation_not_found' } })
    // An unknown key in scope is the same 404.
    expect((await billing('GET', `/${encodeURIComponent('billing:never')}`)).status).toBe(404)
  })

  it("another scope's lease token records no undo reference: only the holder's token writes its attempt", async () => {
    const key = 'support:ticket-10:book'
    const claimed = await support('POST', '/claim', {
      key,
      tool: 'mail.send',
      effect: 'compensable',
      args: { to: 'b@example.com' },
    })
    expect(claimed.body).toMatchObject({ decision: 'execute', attempt: 1 })
    const path = `/${encodeURIComponent(key)}/undo-ref`
    const forged = await billing('POST', path, {
      leaseToken: claimed.body.leaseToken,
      attempt: 1,
      undoRef: { cancel: 'forged' },
    })
    expect(forged.status).toBe(403)
    expect(forged.body).toMatchObject({ error: { code: 'key_out_of_scope' } })
    const own = await support('POST', path, {
      leaseToken: claimed.body.leaseToken,
      attempt: 1,
      undoRef: { cancel: 'real' },
    })
    expect(own.status).toBe(200)
    const attempts = await hookledger.database.sql<Array<{ attempt: number; undo_ref: unknown }>>`
      select a.attempt, a.undo_ref from operation_attempts a join operations o on o.id = a.operation_id
      where o.operation_key = ${`agents/${key}`} order by a.attempt`
    expect(attempts).toEqual([{ attempt: 1, undo_ref: { cancel: 'real' } }])
  })
})

describe('evidence settles only what its rule is scoped to, and only after the claim', () => {
  it('an event from an unrelated source leaves the operation unsettled, kept as a hint', async () => {
    const key = 'order_501'
    const first = await hookledger.service.outbound.invoke(lostCharge, { key, args: { amount: 5 } })
    expect(first.kind).toBe('needs_reconciliation')
    const eventId = await sendEvidence('shop', 'refund.failed', key, 'declined')
    await until(
      'the evidence to be closed',
      () => evidenceFor(hookledger.database.sql, key),
      (rows) => rows[0]?.status === 'not_applicable',
    )
    expect(await operation(key)).toMatchObject({ status: 'needs_reconciliation' })
    expect(await evidenceFor(hookledger.database.sql, key)).toEqual([
      expect.objectContaining({
        source: 'shop',
        eventId,
        status: 'not_applicable',
        note: 'the operation is outside the scope its rule settles',
      }),
    ])
  })

  it("a failure event received before the claim does not answer an agent's unknown report with failed", async () => {
    const key = 'order_502'
    // The event names a key nobody has claimed yet.
    const eventId = await sendEvidence('stripe', 'charge.failed', `agents/${key}`, 'card_declined')
    await sleep(1100) // past the clock margin
    const claimed = await anyAgent('POST', '/claim', {
      key,
      tool: 'stripe.charge',
      effect: 'irreversible',
      args: { amount: 7 },
    })
    expect(claimed.body).toMatchObject({ decision: 'execute', ledgerKey: `agents/${key}` })
    const reported = await anyAgent('POST', `/${encodeURIComponent(key)}/outcome`, {
      leaseToken: claimed.body.leaseToken,
      attempt: claimed.body.attempt,
      outcome: 'unknown',
      error: 'socket hang up',
    })
    // Not "failed — definitely did not happen": that would invite a second charge under a new key.
    expect(reported.body).toMatchObject({ decision: 'escalated', status: 'needs_reconciliation' })
    expect(await evidenceFor(hookledger.database.sql, `agents/${key}`)).toEqual([
      expect.objectContaining({
        eventId,
        status: 'not_applicable',
        note: 'its event was received before the operation was first claimed',
      }),
    ])
  })

  it("an event naming a route delivery's key never completes it", async () => {
    const eventId = 'msg_exhausted_forward'
    const body = JSON.stringify({ type: 'order.created', id: eventId })
    const answer = await fetch(`${hookledger.url}/webhooks/dead`, {
      method: 'POST',
      body,
      headers: signedHeaders(body, { id: eventId }),
    })
    expect(answer.status).toBe(200)
    const forwardKey = `dead:${eventId}:route:main`
    await until(
      'the route delivery to run out of attempts',
      () => eventStatus('dead', eventId),
      (status) => status === 'failed',
    )
    const before = (await operation(forwardKey))?.status
    expect(before).toBe('exhausted')
    await sendEvidence('stripe', 'forward.done', forwardKey)
    await until(
      'the evidence to be closed',
      () => evidenceFor(hookledger.database.sql, forwardKey),
      (rows) => rows[0]?.status === 'not_applicable',
    )
    expect(await operation(forwardKey)).toMatchObject({ status: 'exhausted' })
    expect((await evidenceFor(hookledger.database.sql, forwardKey))[0]?.note).toBe(
      'the operation is internal to the service',
    )
  })
})
