import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { buildConfig } from '../../src/service/config.js'
import { adminCookie, deliverEvent } from '../support/delivery.js'
import { captureLogs } from '../support/log-capture.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// Traces end to end: a collector of the test's own (OTLP/HTTP JSON, as the exporter sends it), a
// delivery forwarded to a destination that fails once, an agent that claims and settles an operation
// in the trace the forward handed it, and the same delivery with tracing off.

const ADMIN_TOKEN = 'admin-token-tracing-test'
const AGENT_TOKEN = 'agent-token-tracing-test'

interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes?: Array<{ key: string; value: Record<string, unknown> }>
  events?: Array<{ name: string }>
  links?: Array<{ traceId: string; spanId: string }>
  status?: { code?: number }
}

interface Collector {
  url: string
  requests: number
  spans: OtlpSpan[]
  serviceNames: Set<string>
  close(): Promise<void>
}

/** An OTLP/HTTP receiver: collects the spans POSTed as JSON to /v1/traces. */
async function startCollector(): Promise<Collector> {
  const collector = {
    requests: 0,
    spans: [] as OtlpSpan[],
    serviceNames: new Set<string>(),
  }
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      collector.requests += 1
      if (request.url !== '/v1/traces') {
        response.writeHead(404).end()
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans?: Array<{
          resource?: { attributes?: Array<{ key: string; value: { stringValue?: string } }> }
          scopeSpans?: Array<{ spans?: OtlpSpan[] }>
        }>
      }
      for (const resource of body.resourceSpans ?? []) {
        const name = resource.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue
        if (name !== undefined) collector.serviceNames.add(name)
        for (const scope of resource.scopeSpans ?? []) collector.spans.push(...(scope.spans ?? []))
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return Object.assign(collector, {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  })
}

const attribute = (span: OtlpSpan, key: string) => {
  const value = span.attributes?.find((a) => a.key === key)?.value
  return value === undefined ? undefined : Object.values(value)[0]
}

const SERVER = 2
const CLIENT = 3
const CONSUMER = 5

function configFor(sinkUrl: string) {
  return buildConfig(
    {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sinkUrl },
        },
        {
          // No handler: its events settle the agents' charges whose outcome is unknown.
          id: 'pay',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          evidence: [
            {
              eventTypes: ['charge.succeeded'],
              operationKey: '/data/key',
              downstreamId: '/data/id',
              settles: { tools: ['charge'], keyPrefixes: ['agents/order:'] },
            },
          ],
        },
      ],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
    },
    () => undefined,
  )
}

async function until<T>(what: string, read: () => T | Promise<T>, done: (value: T) => boolean): Promise<T> {
  for (let i = 0; i < 150; i += 1) {
    const value = await read()
    if (done(value)) return value
    await sleep(100)
  }
  throw new Error(`timed out waiting for ${what}`)
}

let collector: Collector
let running: TestService | undefined
const closers: Array<() => Promise<void>> = []

beforeAll(async () => {
  collector = await startCollector()
})
afterEach(async () => {
  await running?.close()
  running = undefined
  for (const close of closers.splice(0)) await close()
})
afterAll(async () => {
  await collector.close()
})

describe('OpenTelemetry traces', () => {
  it('receive → worker attempts → forward (traceparent to the destination) → agent claim and outcome, one trace', async () => {
    const sink = await startSink((_request, index) => (index === 0 ? { status: 500 } : { status: 200 }))
    closers.push(sink.close)
    const logs = captureLogs('info')
    running = await startTestService({
      config: configFor(sink.url),
      logger: logs.logger,
      env: {
        ADMIN_TOKEN,
        AGENT_TOKEN,
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        OTEL_SERVICE_NAME: 'hookledger-under-test',
      },
    })
    const { url, database } = running
    const rowId = await deliverEvent(url, 'acme', 'evt_traced_1')
    // The first send answers 500, the event's second attempt delivers it.
    await until(
      'two sends',
      () => sink.received.length,
      (n) => n >= 2,
    )
    await until(
      'DONE',
      async () => {
        const [row] = await database.sql<Array<{ status: string }>>`
          select status::text from inbound_events where id = ${rowId}`
        return row?.status
      },
      (status) => status === 'done',
    )
    const [row] = await database.sql<Array<{ trace_parent: string | null }>>`
      select trace_parent from inbound_events where id = ${rowId}`
    const traceId = row?.trace_parent?.split('-')[1] ?? ''
    expect(traceId).toMatch(/^[0-9a-f]{32}$/)

    // The admin page shows the trace id among the event's facts.
    const cookie = await adminCookie(url, ADMIN_TOKEN)
    const page = await (await fetch(`${url}/admin/events/${rowId}`, { headers: { cookie } })).text()
    expect(page).toContain('Trace id')
    expect(page).toContain(traceId)

    // The worker's log lines for the event carry the trace id (the failed first attempt logs one).
    const failureLog = logs.entries().find((entry) => entry.eventRowId === rowId && entry.attempt === 1)
    expect(failureLog).toMatchObject({ traceId })

    // A source's own forward writes no operation to carry the trace: its event's row carries it.
    const [forwardOps] = await database.sql<Array<{ n: number }>>`
      select count(*)::int as n from operations where operation_key like 'acme:evt_traced_1:%'`
    expect(forwardOps?.n).toBe(0)

    // An agent continues the trace the destination was given: its claim and outcome join it.
    const traceparent = String(sink.received[1]?.headers.traceparent)
    const agentHeaders = {
      authorization: `Bearer ${AGENT_TOKEN}`,
      'content-type': 'application/json',
      traceparent,
    }
    const claim = await fetch(`${url}/v1/operations/claim`, {
      method: 'POST',
      headers: agentHeaders,
      body: JSON.stringify({ key: 'order:1:email', tool: 'email', effect: 'idempotent', args: { to: 'x' } }),
    })
    expect(claim.status).toBe(200)
    const claimed = (await claim.json()) as { decision: string; leaseToken: string; attempt: number }
    expect(claimed.decision).toBe('execute')
    const outcome = await fetch(`${url}/v1/operations/order%3A1%3Aemail/outcome`, {
      method: 'POST',
      headers: agentHeaders,
      body: JSON.stringify({
        leaseToken: claimed.leaseToken,
        attempt: claimed.attempt,
        outcome: 'success',
        result: { sent: true },
      }),
    })
    expect(outcome.status).toBe(200)
    const [operation] = await database.sql<Array<{ trace_id: string | null }>>`
      select trace_id from operations where operation_key = 'agents/order:1:email'`
    expect(operation?.trace_id).toBe(traceId)

    // close() flushes the spans still buffered.
    await running.close()
    running = undefined
    expect(collector.serviceNames).toContain('hookledger-under-test')
    const inTrace = collector.spans.filter((span) => span.traceId === traceId)
    const named = (name: string) => inTrace.filter((span) => span.name === name)

    const [receive, ...otherReceives] = named('POST /webhooks/:source')
    expect(otherReceives).toEqual([])
    if (receive === undefined) throw new Error('no receive span')
    expect(receive.kind).toBe(SERVER)
    expect(receive.parentSpanId ?? '').toBe('')
    expect(attribute(receive, 'hookledger.outcome')).toBe('accepted')
    expect(attribute(receive, 'hookledger.event_row_id')).toBe(rowId)
    expect(attribute(receive, 'http.response.status_code')).toBe(200)
    expect(receive.events?.map((event) => event.name)).toEqual(['verified', 'claim committed'])
    expect(row?.trace_parent).toBe(`00-${traceId}-${receive.spanId}-01`)

    // One worker span per attempt, each a child of the receive span.
    const attempts = named('process event').sort(
      (a, b) => Number(attribute(a, 'hookledger.attempt')) - Number(attribute(b, 'hookledger.attempt')),
    )
    expect(
      attempts.map((span) => [attribute(span, 'hookledger.attempt'), attribute(span, 'hookledger.result')]),
    ).toEqual([
      [1, 'retry'],
      [2, 'done'],
    ])
    for (const attempt of attempts) {
      expect(attempt.kind).toBe(CONSUMER)
      expect(attempt.parentSpanId).toBe(receive.spanId)
    }
    expect(attempts[0]?.status?.code).toBe(2) // ERROR

    // One forward span per attempt, a child of that attempt's span; the destination got its context.
    const forwards = named('forward')
    expect(forwards).toHaveLength(2)
    for (const [index, attempt] of attempts.entries()) {
      const forward = forwards.find((span) => span.parentSpanId === attempt.spanId)
      if (forward === undefined) throw new Error(`no forward span under attempt ${index + 1}`)
      expect(forward.kind).toBe(CLIENT)
      expect(attribute(forward, 'http.response.status_code')).toBe(index === 0 ? 500 : 200)
      expect(attribute(forward, 'server.address')).toBe(new URL(sink.url).host)
      expect(sink.received[index]?.headers.traceparent).toBe(`00-${traceId}-${forward.spanId}-01`)
    }

    // The agent's claim and outcome, children of the forward whose traceparent the agent sent.
    const lastForwardSpanId = traceparent.split('-')[2]
    const [claimSpan] = named('operation claim')
    const [outcomeSpan] = named('operation outcome')
    expect(claimSpan).toMatchObject({ parentSpanId: lastForwardSpanId, kind: SERVER })
    expect(outcomeSpan).toMatchObject({ parentSpanId: lastForwardSpanId, kind: SERVER })
    if (claimSpan === undefined || outcomeSpan === undefined) throw new Error('no agent spans')
    expect(attribute(claimSpan, 'hookledger.decision')).toBe('execute')
    expect(attribute(claimSpan, 'hookledger.operation.key')).toBe('agents/order:1:email')
    expect(attribute(outcomeSpan, 'hookledger.decision')).toBe('completed')
  })

  it('a settlement by evidence is a span under the worker span of the event that carried it', async () => {
    const sink = await startSink(() => ({ status: 200 }))
    closers.push(sink.close)
    running = await startTestService({
      config: configFor(sink.url),
      env: { AGENT_TOKEN, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url },
    })
    const { url, database } = running
    const headers = { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' }
    const claim = await fetch(`${url}/v1/operations/claim`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        key: 'order:2:charge',
        tool: 'charge',
        effect: 'irreversible',
        args: { amount: 5 },
      }),
    })
    const claimed = (await claim.json()) as { decision: string; leaseToken: string; attempt: number }
    expect(claimed.decision).toBe('execute')
    const reported = await fetch(`${url}/v1/operations/order%3A2%3Acharge/outcome`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        leaseToken: claimed.leaseToken,
        attempt: claimed.attempt,
        outcome: 'unknown',
        error: 'socket hang up',
      }),
    })
    expect(reported.status).toBe(200)
    const rowId = await deliverEvent(url, 'pay', 'evt_evidence_1', {
      type: 'charge.succeeded',
      data: { key: 'agents/order:2:charge', id: 'ch_2' },
    })
    await until(
      'the charge to be settled',
      async () => {
        const [op] = await database.sql<Array<{ status: string }>>`
          select status::text from operations where operation_key = 'agents/order:2:charge'`
        return op?.status
      },
      (status) => status === 'completed',
    )
    const [row] = await database.sql<Array<{ trace_parent: string | null }>>`
      select trace_parent from inbound_events where id = ${rowId}`
    const traceId = row?.trace_parent?.split('-')[1]
    await running.close()
    running = undefined
    const inTrace = collector.spans.filter((span) => span.traceId === traceId)
    const worker = inTrace.find((span) => span.name === 'process event')
    const settle = inTrace.find((span) => span.name === 'operation settle by evidence')
    if (worker === undefined || settle === undefined) throw new Error('no worker or settlement span')
    expect(settle.parentSpanId).toBe(worker.spanId)
    expect(attribute(settle, 'hookledger.operation.key')).toBe('agents/order:2:charge')
    expect(attribute(settle, 'hookledger.settled')).toBe(true)
    expect(attribute(settle, 'hookledger.status')).toBe('completed')
  })

  it('off by default: no traceparent to the destination, no trace on the row, nothing exported', async () => {
    const sink = await startSink(() => ({ status: 200 }))
    closers.push(sink.close)
    const before = collector.requests
    running = await startTestService({ config: configFor(sink.url), env: { ADMIN_TOKEN } })
    const rowId = await deliverEvent(running.url, 'acme', 'evt_untraced_1')
    await until(
      'the send',
      () => sink.received.length,
      (n) => n >= 1,
    )
    expect(sink.received[0]?.headers.traceparent).toBeUndefined()
    const [row] = await running.database.sql<Array<{ trace_parent: string | null }>>`
      select trace_parent from inbound_events where id = ${rowId}`
    expect(row?.trace_parent).toBeNull()
    const cookie = await adminCookie(running.url, ADMIN_TOKEN)
    const page = await (await fetch(`${running.url}/admin/events/${rowId}`, { headers: { cookie } })).text()
    expect(page).toContain('received with tracing off')
    await running.close()
    running = undefined
    expect(collector.requests).toBe(before)
  })

  it('OTEL_SDK_DISABLED=true wins over an endpoint', async () => {
    const sink = await startSink(() => ({ status: 200 }))
    closers.push(sink.close)
    const before = collector.requests
    running = await startTestService({
      config: configFor(sink.url),
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SDK_DISABLED: 'true' },
    })
    await deliverEvent(running.url, 'acme', 'evt_disabled_1')
    await until(
      'the send',
      () => sink.received.length,
      (n) => n >= 1,
    )
    expect(sink.received[0]?.headers.traceparent).toBeUndefined()
    await running.close()
    running = undefined
    expect(collector.requests).toBe(before)
  })
})
