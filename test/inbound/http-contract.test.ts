import { Queue } from 'bullmq'
import { eq } from 'drizzle-orm'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createClaimBatcher } from '../../src/db/claims.js'
import { openLedger } from '../../src/db/client.js'
import { inboundConflicts, inboundEvents } from '../../src/db/schema.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createApp } from '../../src/http/app.js'
import { createLogger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { bullmqJobQueue } from '../../src/queue/bullmq.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { INBOUND_QUEUE, processEventJobId } from '../../src/queue/jobs.js'
import { testRedisUrl } from '../support/env.js'
import { SPEC_VECTOR, signedHeaders } from '../support/signing.js'
import { type ApiStack, createApiStack, testConfig, uniquePrefix } from '../support/stack.js'
import { storedEvents } from '../support/stored-events.js'

let stack: ApiStack

beforeAll(async () => {
  stack = await createApiStack(testConfig({ server: { bodyLimitBytes: 4096 } }))
})
afterAll(async () => {
  await stack.close()
})

function post(body: string, headers: Record<string, string>, source = 'acme') {
  return stack.app.request(`/webhooks/${source}`, { method: 'POST', body, headers })
}

async function rowCount() {
  return (await stack.database.db.select().from(inboundEvents)).length
}

describe('POST /webhooks/:source — the HTTP contract', () => {
  it('200 accepted: the row is committed with the raw body, its hash and the headers that matter', async () => {
    const body = '{"type":"invoice.paid","data":{"amount":  100}}'
    const response = await post(body, signedHeaders(body, { id: 'evt_accepted' }))
    expect(response.status).toBe(200)
    const answer = (await response.json()) as { status: string; id: string }
    expect(answer.status).toBe('accepted')
    const [row] = await storedEvents(stack.database.db, eq(inboundEvents.id, answer.id))
    expect(row).toMatchObject({
      source: 'acme',
      eventId: 'evt_accepted',
      eventType: 'invoice.paid',
      status: 'pending',
    })
    expect(row?.body.toString('utf8')).toBe(body) // exact bytes, whitespace included
    expect(row?.payloadHash).toMatch(/^[0-9a-f]{64}$/)
    expect(Object.keys(row?.headers ?? {}).sort()).toEqual([
      'content-type',
      'webhook-id',
      'webhook-signature',
      'webhook-timestamp',
    ])
  })

  it('hands the accepted row to the queue as a job carrying only its id', async () => {
    const body = '{"type":"queued"}'
    const response = await post(body, signedHeaders(body, { id: 'evt_queued' }))
    const { id } = (await response.json()) as { id: string }
    await expect
      .poll(async () => (await stack.queue.getJob(processEventJobId(id)))?.data)
      .toEqual({ eventRowIds: [id] })
    await expect
      .poll(async () => {
        const [row] = await stack.database.db.select().from(inboundEvents).where(eq(inboundEvents.id, id))
        return row?.enqueuedAt instanceof Date
      })
      .toBe(true)
  })

  it('200 duplicate for the same id and payload, re-signed as a provider retry would be', async () => {
    const body = '{"type":"retry"}'
    const first = await post(body, signedHeaders(body, { id: 'evt_retry' }))
    const later = signedHeaders(body, { id: 'evt_retry', timestamp: new Date(Date.now() + 60_000) })
    const second = await post(body, later)
    expect(second.status).toBe(200)
    const [a, b] = [
      (await first.json()) as { id: string },
      (await second.json()) as { status: string; id: string },
    ]
    expect(b).toEqual({ status: 'duplicate', id: a.id })
  })

  it('409 for the same id with another payload; the original row is untouched and the conflict recorded', async () => {
    const original = '{"type":"order","total":10}'
    const accepted = (await (
      await post(original, signedHeaders(original, { id: 'evt_conflict' }))
    ).json()) as {
      id: string
    }
    const readRow = async () =>
      (await stack.database.db.select().from(inboundEvents).where(eq(inboundEvents.id, accepted.id)))[0]
    // Let the enqueue mark land first, so the only change left to detect is one the conflict made.
    await expect.poll(async () => (await readRow())?.enqueuedAt instanceof Date).toBe(true)
    const before = await readRow()
    const tampered = '{"type":"order","total":99}'
    const response = await post(tampered, signedHeaders(tampered, { id: 'evt_conflict' }))
    expect(response.status).toBe(409)
    expect(await response.json()).toMatchObject({ error: { code: 'event_id_conflict' } })
    expect(await readRow()).toEqual(before)
    const conflicts = await stack.database.db
      .select()
      .from(inboundConflicts)
      .where(eq(inboundConflicts.eventId, 'evt_conflict'))
    expect(conflicts).toHaveLength(1)
    expect(conflicts[0]?.originalPayloadHash).toBe(before?.payloadHash)
  })

  it.each([
    [
      'missing signature headers',
      400,
      'missing_signature_headers',
      (h: Record<string, string>) => omit(h, 'webhook-signature'),
    ],
    [
      'a malformed timestamp',
      400,
      'malformed_signature_header',
      (h: Record<string, string>) => ({ ...h, 'webhook-timestamp': 'soon' }),
    ],
    [
      'a malformed signature',
      400,
      'malformed_signature_header',
      (h: Record<string, string>) => ({ ...h, 'webhook-signature': 'v1' }),
    ],
    [
      'a wrong signature',
      401,
      'invalid_signature',
      (h: Record<string, string>) => ({
        ...h,
        'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}`,
      }),
    ],
    [
      'an expired timestamp',
      401,
      'timestamp_out_of_tolerance',
      (h: Record<string, string>) => ({ ...h, 'webhook-timestamp': '1614265330' }),
    ],
  ])('%s: %i %s, and nothing is written', async (_, status, code, mutate) => {
    const before = await rowCount()
    const body = '{"type":"rejected"}'
    const response = await post(body, mutate(signedHeaders(body, { id: `evt_${code}` })))
    expect(response.status).toBe(status)
    const answer = (await response.json()) as { error: { code: string; message: string } }
    expect(answer.error.code).toBe(code)
    expect(answer.error.message.length).toBeGreaterThan(0)
    expect(await rowCount()).toBe(before)
  })

  it('400 invalid_json for a correctly signed body that is not JSON, and nothing is written', async () => {
    const before = await rowCount()
    const response = await post('{"unterminated', signedHeaders('{"unterminated', { id: 'evt_badjson' }))
    expect(response.status).toBe(400)
    expect(await response.json()).toMatchObject({ error: { code: 'invalid_json' } })
    expect(await rowCount()).toBe(before)
  })

  it('404 for an unknown source', async () => {
    const body = '{}'
    const response = await post(body, signedHeaders(body, { id: 'evt_404' }), 'nobody')
    expect(response.status).toBe(404)
    expect(await response.json()).toMatchObject({ error: { code: 'unknown_source' } })
  })

  it('413 for a body over the limit, with or without a Content-Length, and nothing is written', async () => {
    const before = await rowCount()
    const body = JSON.stringify({ pad: 'x'.repeat(5000) })
    const response = await post(body, signedHeaders(body, { id: 'evt_big' }))
    expect(response.status).toBe(413)
    expect(await response.json()).toMatchObject({ error: { code: 'payload_too_large' } })
    const stream = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(body))
        controller.close()
      },
    })
    const streamed = await stack.app.request('/webhooks/acme', {
      method: 'POST',
      body: stream,
      headers: signedHeaders(body, { id: 'evt_big_stream' }),
      duplex: 'half',
    } as RequestInit)
    expect(streamed.status).toBe(413)
    expect(await rowCount()).toBe(before)
  })

  it('accepts the spec example vector end to end once its timestamp is within a configured tolerance', async () => {
    const config = testConfig(
      {},
      {
        verify: {
          scheme: 'standard-webhooks',
          secrets: [SPEC_VECTOR.secret],
          toleranceSeconds: 7 * 24 * 3600,
        },
      },
    )
    const source = config.sources.get('acme')
    expect(source).toBeDefined()
    const verification = source?.verifier.verify({
      raw: Buffer.from(SPEC_VECTOR.body),
      headers: {
        'webhook-id': SPEC_VECTOR.id,
        'webhook-timestamp': String(SPEC_VECTOR.timestamp),
        'webhook-signature': SPEC_VECTOR.signature,
      },
      now: (SPEC_VECTOR.timestamp + 3600) * 1000,
    })
    expect(verification?.kind).toBe('verified')
  })

  it('503 when the ledger is unreachable — never 200 — and Retry-After is set', async () => {
    const unreachable = openLedger('postgres://postgres@127.0.0.1:1/nothing')
    const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, enableOfflineQueue: false })
    const queue = new Queue(INBOUND_QUEUE, { connection, prefix: uniquePrefix() })
    const logger = createLogger('silent')
    const enqueuer = createEnqueuer({
      queue: bullmqJobQueue(queue),
      sql: unreachable.sql,
      logger,
      failpoints: noFailpoints,
    })
    const claims = createClaimBatcher(unreachable.sql)
    const app = createApp({
      config: testConfig(),
      db: unreachable.db,
      claims,
      enqueuer,
      logger,
      readiness: [],
      metrics: createMetrics(),
    })
    try {
      const body = '{"type":"down"}'
      const response = await app.request('/webhooks/acme', {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: 'evt_down' }),
      })
      expect(response.status).toBe(503)
      expect(response.headers.get('retry-after')).toBe('5')
      expect(await response.json()).toMatchObject({ error: { code: 'ledger_unavailable' } })
    } finally {
      await queue.close()
      connection.disconnect()
      await unreachable.close()
    }
  })
})

describe('GET /metrics', () => {
  it('counts every answer of /webhooks/:source by source and outcome', async () => {
    const text = await (await stack.app.request('/metrics')).text()
    // The tests above sent exactly these (this file runs its tests in order).
    const count = (outcome: string, source = 'acme') =>
      Number(
        text.match(
          new RegExp(
            `hookledger_deliveries_total\\{source="${escapeRegExp(source)}",outcome="${outcome}"\\} (\\d+)`,
          ),
        )?.[1] ?? 0,
      )
    expect(count('accepted')).toBe(4)
    expect(count('duplicate')).toBe(1)
    expect(count('conflict')).toBe(1)
    expect(count('invalid_signature')).toBe(1)
    expect(count('timestamp_out_of_tolerance')).toBe(1)
    expect(count('malformed_signature_header')).toBe(2)
    expect(count('invalid_json')).toBe(1)
    expect(count('payload_too_large')).toBe(2)
    expect(count('unknown_source', '(unknown)')).toBe(1)
  })
})

function escapeRegExp(text: string) {
  return text.replace(/[()]/g, '\\$&')
}

function omit(headers: Record<string, string>, name: string) {
  return Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name))
}
