import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildConfig } from '../../src/service/config.js'
import { startChild } from '../support/child.js'
import { busiestWindow, deliverEvent, statusCounts, useDeliveryTest } from '../support/delivery.js'
import { testRedisUrl } from '../support/env.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { uniquePrefix } from '../support/stack.js'

const t = useDeliveryTest()
let directory: string

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'hookledger-limits-'))
})
afterAll(async () => {
  await rm(directory, { recursive: true, force: true })
})

const verify = { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }

async function _deliver(
  url: string,
  id: string,
  payload: Record<string, unknown> = { type: 'order.created' },
) {
  const body = JSON.stringify(payload)
  const response = await fetch(`${url}/webhooks/shop`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
  return ((await response.json()) as { id: string }).id
}

async function _eventCounts(source: string) {
  return t.database.sql<Array<{ status: string; n: number }>>`
    select status::text, count(*)::int as n from inbound_events where source = ${source} group by status`
}

describe('destination limits', () => {
  it('200 events to a route limited to 20/s across two worker processes: at most 20 per second, all arrive once', async () => {
    const arrivals: number[] = []
    const ids = new Set<string>()
    const destination = await startSink((request) => {
      arrivals.push(Date.now())
      ids.add(String(request.headers['x-hookledger-event-id']))
      return { status: 200 }
    })
    t.closeAfter(destination.close)
    const config = join(directory, 'rate.json')
    await writeFile(
      config,
      JSON.stringify({
        sources: [
          {
            id: 'shop',
            verify,
            routes: [{ id: 'slow', forward: { url: destination.url, rateLimit: { perSecond: 20 } } }],
          },
        ],
        worker: { ...FAST_WORKER, concurrency: 8, maxAttempts: 3 },
        relay: FAST_RELAY,
        queue: { prefix: uniquePrefix() },
      }),
    )
    const env = { DATABASE_URL: t.database.url, REDIS_URL: testRedisUrl(), HOOKLEDGER_CONFIG: config }
    const api = await startChild(['bin/hookledger.js', 'serve', '--role', 'all'], env)
    const worker = await startChild(['bin/hookledger.js', 'serve', '--role', 'worker'], env)
    for (const child of [api, worker]) t.closeAfter(async () => void (await child.kill('SIGTERM')))

    for (let batch = 0; batch < 10; batch += 1) {
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => deliverEvent(api.url, 'shop', `evt_rate_${batch * 20 + i}`)),
      )
    }
    await expect
      .poll(async () => (await statusCounts(t.database.sql, 'shop')).done, {
        timeout: 90_000,
        interval: 500,
      })
      .toBe(200)
    expect(ids.size).toBe(200)
    expect(arrivals).toHaveLength(200)
    // rate-limiter-flexible counts fixed one-second windows: a sliding second can straddle two of
    // them, the one window of slack. Spread over time the rate is the limit: 200 events need at
    // least nine full windows after the first. The sink sees arrivals, not admissions: a send
    // delayed on the way (a loaded host's pause) lands beside later ones, so each sliding window is
    // shortened by the delay allowed, and its admissions then still fit the windows counted (a CI
    // run counted 61 arrivals in 2 s at full length).
    const ARRIVAL_JITTER_MS = 250
    const busiest = busiestWindow(arrivals, 1000 - ARRIVAL_JITTER_MS)
    expect(busiest).toBeLessThanOrEqual(40)
    expect(busiestWindow(arrivals, 2000 - ARRIVAL_JITTER_MS)).toBeLessThanOrEqual(60)
    const spread = Math.max(...arrivals) - Math.min(...arrivals)
    expect(spread).toBeGreaterThanOrEqual(8500)
    // Waiting for the limit used up no attempt: nothing failed, and no event needed a second try.
    expect(await statusCounts(t.database.sql, 'shop')).toEqual({ done: 200 })
    const [retried] = await t.database.sql<Array<{ n: number }>>`
      select count(*)::int as n from event_attempts a join inbound_events e on e.id = a.event_row_id
      where e.source = 'shop' and a.outcome = 'error'`
    expect(retried?.n).toBe(0)
  }, 150_000)

  it('caps the deliveries in flight to a destination and honours Retry-After (in-process queue)', async () => {
    let inFlight = 0
    let most = 0
    const answered: number[] = []
    const slow = await startSink(async () => {
      inFlight += 1
      most = Math.max(most, inFlight)
      await new Promise((resolve) => setTimeout(resolve, 150))
      inFlight -= 1
      return { status: 200 }
    })
    t.closeAfter(slow.close)
    const busy = await startSink(async (_, index) => {
      answered.push(Date.now())
      return index === 0 ? { status: 429, body: 'slow down' } : { status: 200 }
    })
    t.closeAfter(busy.close)
    // Retry-After is a header: the sink helper sets none, so this destination is a proxy that adds it.
    const proxy = createServer((request, response) => {
      const chunks: Buffer[] = []
      request.on('data', (chunk: Buffer) => chunks.push(chunk))
      request.on('end', async () => {
        const upstream = await fetch(busy.url, { method: 'POST', body: Buffer.concat(chunks) })
        response
          .writeHead(upstream.status, upstream.status === 429 ? { 'retry-after': '2' } : {})
          .end(await upstream.text())
      })
    })
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
    t.closeAfter(() => new Promise<void>((resolve) => proxy.close(() => resolve())))
    const proxyPort = (proxy.address() as { port: number }).port

    const service = await t.start({
      inProcessQueue: true,
      config: buildConfig(
        {
          sources: [
            {
              id: 'capped',
              verify,
              routes: [
                {
                  id: 'slow',
                  filter: { types: ['order.created'] },
                  forward: { url: slow.url, concurrency: 2 },
                },
                {
                  id: 'busy',
                  filter: { types: ['order.paid'] },
                  forward: { url: `http://127.0.0.1:${proxyPort}/hooks` },
                },
              ],
            },
          ],
          worker: { ...FAST_WORKER, concurrency: 8 },
          relay: FAST_RELAY,
        },
        () => undefined,
      ),
    })
    const post = (id: string, type: string) => deliverEvent(service.url, 'capped', id, { type })
    await Promise.all(Array.from({ length: 12 }, (_, i) => post(`evt_cap_${i}`, 'order.created')))
    await post('evt_paid_1', 'order.paid')
    await expect
      .poll(async () => (await statusCounts(t.database.sql, 'capped')).done, {
        timeout: 30_000,
      })
      .toBe(13)
    expect(slow.received).toHaveLength(12)
    expect(most).toBeLessThanOrEqual(2)
    expect(most).toBe(2)
    expect(answered).toHaveLength(2)
    // Retry-After: 2 s held the destination back, whatever the worker's own backoff (50 ms) said.
    expect((answered[1] ?? 0) - (answered[0] ?? 0)).toBeGreaterThanOrEqual(1900)
  }, 60_000)
})
