import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildConfig } from '../../src/service/config.js'
import { gate } from '../support/gate.js'
import { FAST_RELAY, startTestService, type TestService } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// The receiver protects itself before it falls over: at the backlog bound new deliveries (and agents'
// claims) get 429 with Retry-After, which providers retry on, and nothing answered 200 is lost.

const BOUND = 1000
const AGENT_TOKEN = 'agent-token-backpressure-test'

let hookledger: TestService
let sink: Awaited<ReturnType<typeof startSink>>
let alerts: Awaited<ReturnType<typeof startSink>>
const stalled = gate()

beforeAll(async () => {
  // A destination that takes requests and answers none until the test lets it.
  sink = await startSink(async () => {
    await stalled.opened
    return { status: 200 }
  })
  alerts = await startSink(() => ({ status: 200 }))
  const config = buildConfig(
    {
      sources: [
        {
          id: 'busy',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sink.url, timeoutMs: 60_000 },
        },
      ],
      server: { backpressure: { maxBacklog: BOUND, checkIntervalMs: 200, retryAfterSeconds: 7 } },
      worker: { concurrency: 8, maxAttempts: 5, handlerTimeoutMs: 60_000, leaseMs: 90_000 },
      relay: FAST_RELAY,
      alerts: {
        channels: [{ type: 'webhook', id: 'ops', url: alerts.url, secret: TEST_SECRET }],
        checkIntervalMs: 200,
      },
    },
    () => undefined,
  )
  hookledger = await startTestService({ config, env: { AGENT_TOKEN } })
}, 60_000)

afterAll(async () => {
  stalled.open()
  await hookledger?.close()
  await sink?.close()
  await alerts?.close()
})

async function deliver(id: string) {
  const body = JSON.stringify({ type: 'order.created', id })
  const response = await fetch(`${hookledger.url}/webhooks/busy`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: await response.json(),
  }
}

describe('backpressure at the backlog bound', () => {
  it('answers 429 with Retry-After from the bound on, forwards every 200-answered event once the destination recovers, then accepts again', async () => {
    const accepted: string[] = []
    // 1,000 deliveries, 20 at a time: every one is committed and answered 200.
    for (let start = 0; start < BOUND; start += 20) {
      const ids = Array.from({ length: 20 }, (_, i) => `evt_bp_${start + i}`)
      const answers = await Promise.all(ids.map(deliver))
      for (const [i, answer] of answers.entries()) {
        expect(answer.status, ids[i]).toBe(200)
        accepted.push(ids[i] ?? '')
      }
    }
    // The 1,001st: refused before anything is written, with a delay the provider honours.
    const refused = await deliver('evt_bp_over')
    expect(refused.status).toBe(429)
    expect(refused.retryAfter).toBe('7')
    expect(refused.body).toMatchObject({ error: { code: 'ledger_busy' } })
    const [written] = await hookledger.database.sql<Array<{ n: number }>>`
      select count(*)::int as n from inbound_events where event_id = 'evt_bp_over'`
    expect(written?.n).toBe(0)
    // Agents' claims write to the same ledger: refused the same way.
    const claim = await fetch(`${hookledger.url}/v1/operations/claim`, {
      method: 'POST',
      headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'refund-1', tool: 'refund', effect: 'idempotent', args: {} }),
    })
    expect(claim.status).toBe(429)
    expect(claim.headers.get('retry-after')).toBe('7')
    const metrics = await (await fetch(`${hookledger.url}/metrics`)).text()
    expect(metrics).toMatch(/hookledger_backpressure\{reason="backlog"\} 1/)
    expect(metrics).toMatch(/hookledger_backpressure_refusals_total\{reason="backlog"\} [1-9]/)
    // And a person hears of it.
    for (let i = 0; i < 50 && !alerts.received.some((r) => r.body.includes('backpressure')); i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(alerts.received.map((r) => JSON.parse(r.body).type)).toContain('hookledger.alert.backpressure')

    // The destination recovers: every event answered 200 reaches it, once.
    stalled.open()
    const deadline = Date.now() + 60_000
    while (Date.now() < deadline) {
      const [done] = await hookledger.database.sql<Array<{ n: number }>>`
        select count(*)::int as n from inbound_events where source = 'busy' and status = 'done'`
      if ((done?.n ?? 0) >= BOUND) break
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    const received = new Map<string, number>()
    for (const request of sink.received) {
      const id = String((JSON.parse(request.body) as { id: string }).id)
      received.set(id, (received.get(id) ?? 0) + 1)
    }
    expect(accepted.filter((id) => received.get(id) !== 1)).toEqual([])
    expect(received.has('evt_bp_over')).toBe(false)

    // The backlog is counted again: new deliveries are accepted.
    let again = await deliver('evt_bp_after')
    for (let i = 0; i < 20 && again.status === 429; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      again = await deliver('evt_bp_after')
    }
    expect(again.status).toBe(200)
  }, 120_000)
})
