import { eq, sql } from 'drizzle-orm'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { eventAttempts, inboundEvents } from '../../src/db/schema.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { HandlerError } from '../../src/queue/handler.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'

let database: TestDatabase
let running: TestService | undefined

beforeAll(async () => {
  database = await createTestDatabase()
  await database.sql`create table handler_effects (event_id text not null, note text)`
})
afterEach(async () => {
  await running?.close()
  running = undefined
})
afterAll(async () => {
  await database.drop()
})

const fastConfig = (handler: Record<string, unknown> | undefined) =>
  testConfig({ worker: FAST_WORKER, relay: FAST_RELAY }, { handler })

async function deliver(url: string, id: string, payload: Record<string, unknown> = { type: 'test.event' }) {
  const body = JSON.stringify(payload)
  const response = await fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
  return ((await response.json()) as { id: string }).id
}

async function row(id: string) {
  const [found] = await database.db.select().from(inboundEvents).where(eq(inboundEvents.id, id))
  return found
}

async function attempts(id: string) {
  return database.db
    .select()
    .from(eventAttempts)
    .where(eq(eventAttempts.eventRowId, id))
    .orderBy(eventAttempts.attempt)
}

describe('worker', () => {
  it('runs a code handler with the parsed event and its transaction, and marks the row DONE', async () => {
    const seen: unknown[] = []
    const handler: EventHandler = async ({ event, eventId, source, attempt, tx, raw }) => {
      seen.push({ event, eventId, source, attempt, raw: raw.toString('utf8') })
      await tx.execute(sql`insert into handler_effects (event_id, note) values (${eventId}, 'done')`)
    }
    running = await startTestService({ database, config: fastConfig(undefined), handlers: { acme: handler } })
    const id = await deliver(running.url, 'evt_worker_ok', { type: 'invoice.paid', amount: 5 })
    await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('done')
    expect(seen).toEqual([
      {
        event: { type: 'invoice.paid', amount: 5 },
        eventId: 'evt_worker_ok',
        source: 'acme',
        attempt: 1,
        raw: '{"type":"invoice.paid","amount":5}',
      },
    ])
    const done = await row(id)
    expect(done).toMatchObject({ attempts: 1, lastError: null, leaseToken: null })
    expect(done?.processedAt).toBeInstanceOf(Date)
    expect(await attempts(id)).toMatchObject([{ attempt: 1, outcome: 'done' }])
    const metrics = await (await fetch(`${running.url}/metrics`)).text()
    // DONE is not counted on scrape (it would scan the ledger); the histogram counts it instead.
    expect(metrics).not.toContain('hookledger_events{source="acme",status="done"}')
    expect(metrics).toContain('hookledger_handler_attempts_total{source="acme",result="done"} 1')
    expect(metrics).toContain('hookledger_event_processing_seconds_count{source="acme",status="done"} 1')
    expect(metrics).toMatch(/hookledger_queue_jobs\{state="waiting"\} 0/)
  })

  it('retries a failing handler with backoff, rolls back its writes each time, and ends FAILED', async () => {
    const times: number[] = []
    const handler: EventHandler = async ({ eventId, tx }) => {
      times.push(Date.now())
      await tx.execute(
        sql`insert into handler_effects (event_id, note) values (${eventId}, 'never committed')`,
      )
      throw new Error(`downstream refused (call ${times.length})`)
    }
    running = await startTestService({ database, config: fastConfig(undefined), handlers: { acme: handler } })
    const id = await deliver(running.url, 'evt_worker_fail')
    await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('failed')
    const failed = await row(id)
    expect(failed).toMatchObject({ attempts: 3, lastError: 'downstream refused (call 3)' })
    expect(times).toHaveLength(3)
    // Exponential: the second gap is at least the doubled base delay.
    expect((times[1] ?? 0) - (times[0] ?? 0)).toBeGreaterThanOrEqual(FAST_WORKER.backoffBaseMs)
    expect((times[2] ?? 0) - (times[1] ?? 0)).toBeGreaterThanOrEqual(FAST_WORKER.backoffBaseMs * 2)
    expect((await attempts(id)).map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'error'],
      [2, 'error'],
      [3, 'error'],
    ])
    const effects = await database.sql`select * from handler_effects where event_id = 'evt_worker_fail'`
    expect(effects).toHaveLength(0)
  })

  it('recovers after transient failures and records each attempt', async () => {
    let calls = 0
    const handler: EventHandler = async ({ eventId, tx }) => {
      calls += 1
      if (calls < 2)
        throw new HandlerError('temporarily down', { responseStatus: 503, responseExcerpt: 'busy' })
      await tx.execute(sql`insert into handler_effects (event_id, note) values (${eventId}, 'second try')`)
    }
    running = await startTestService({ database, config: fastConfig(undefined), handlers: { acme: handler } })
    const id = await deliver(running.url, 'evt_worker_flaky')
    await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('done')
    expect(await attempts(id)).toMatchObject([
      {
        attempt: 1,
        outcome: 'error',
        responseStatus: 503,
        responseExcerpt: 'busy',
        error: 'temporarily down',
      },
      { attempt: 2, outcome: 'done' },
    ])
    const effects = await database.sql`select * from handler_effects where event_id = 'evt_worker_flaky'`
    expect(effects).toHaveLength(1)
  })

  it('aborts a handler that runs past its timeout and retries it', async () => {
    let calls = 0
    const handler: EventHandler = async ({ signal }) => {
      calls += 1
      if (calls === 1) await new Promise((resolve) => signal.addEventListener('abort', resolve))
    }
    const config = testConfig(
      { worker: { ...FAST_WORKER, handlerTimeoutMs: 300 }, relay: FAST_RELAY },
      { handler: undefined },
    )
    running = await startTestService({ database, config, handlers: { acme: handler } })
    const id = await deliver(running.url, 'evt_worker_slow')
    await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('done')
    expect((await attempts(id))[0]).toMatchObject({
      outcome: 'error',
      error: 'handler did not finish within 300 ms',
    })
  })
})

describe('forward handler', () => {
  it('POSTs the raw body and signature headers with an Idempotency-Key and records the answer', async () => {
    const sink = await startSink(() => ({ status: 202, body: 'queued by destination' }))
    try {
      running = await startTestService({ database, config: fastConfig({ type: 'forward', url: sink.url }) })
      const body = { type: 'invoice.paid', note: 'forwarded  as is' }
      const id = await deliver(running.url, 'evt_forward_ok', body)
      await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('done')
      expect(sink.received).toHaveLength(1)
      const [request] = sink.received
      expect(request?.body).toBe(JSON.stringify(body))
      expect(request?.headers).toMatchObject({
        'idempotency-key': 'acme:evt_forward_ok',
        'x-hookledger-source': 'acme',
        'x-hookledger-event-id': 'evt_forward_ok',
        'webhook-id': 'evt_forward_ok',
        'content-type': 'application/json',
      })
      expect(request?.headers['webhook-signature']).toMatch(/^v1,/)
      expect(await attempts(id)).toMatchObject([
        { outcome: 'done', responseStatus: 202, responseExcerpt: 'queued by destination' },
      ])
    } finally {
      await sink.close()
    }
  })

  it('retries a destination that answers 500 or redirects, then succeeds', async () => {
    const sink = await startSink((_, index) =>
      index === 0
        ? { status: 500, body: 'boom' }
        : index === 1
          ? { status: 302 }
          : { status: 200, body: 'ok' },
    )
    try {
      running = await startTestService({ database, config: fastConfig({ type: 'forward', url: sink.url }) })
      const id = await deliver(running.url, 'evt_forward_retry')
      await expect.poll(async () => (await row(id))?.status, { timeout: 10_000 }).toBe('done')
      expect((await attempts(id)).map((a) => [a.outcome, a.responseStatus])).toEqual([
        ['error', 500],
        ['error', 302],
        ['done', 200],
      ])
      expect(sink.received.map((r) => r.headers['x-hookledger-attempt'])).toEqual(['1', '2', '3'])
    } finally {
      await sink.close()
    }
  })

  it('stops a send that outlives its handler deadline, even when the forward allows longer', async () => {
    // The forward's own timeout (10 s by default) is longer than the handler's (300 ms here): the
    // send must still end with the attempt, not keep a connection to the destination open.
    const { createServer } = await import('node:http')
    let aborted = 0
    const server = createServer((request) => {
      request.resume()
      request.socket.on('close', () => {
        aborted += 1
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const address = server.address()
    const port = typeof address === 'object' && address !== null ? address.port : 0
    try {
      const config = testConfig(
        { worker: { ...FAST_WORKER, handlerTimeoutMs: 300, maxAttempts: 1 }, relay: FAST_RELAY },
        { handler: { type: 'forward', url: `http://127.0.0.1:${port}/hooks` } },
      )
      running = await startTestService({ database, config })
      const id = await deliver(running.url, 'evt_forward_deadline')
      await expect.poll(() => aborted, { timeout: 5000 }).toBeGreaterThan(0)
      await expect.poll(async () => (await row(id))?.status, { timeout: 5000 }).toBe('failed')
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
