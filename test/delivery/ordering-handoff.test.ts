import { describe, expect, it } from 'vitest'
import { buildConfig, type Config } from '../../src/config/config.js'
import { statusCounts, useDeliveryTest } from '../support/delivery.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// One busy ordering key must move at the destination's pace, not at the recheck timer's: the event
// that finishes hands its key to the next one at once. The recheck stays at its default (1 s), so
// 200 events that waited for it would take minutes.

const t = useDeliveryTest()
const EVENTS = 200

function config(source: Record<string, unknown>): Config {
  return buildConfig(
    {
      sources: [{ verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }, ...source }],
      worker: { concurrency: 8 },
      relay: { intervalMs: 200, graceMs: 300, orphanAfterMs: 2000 },
    },
    () => undefined,
  )
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function deliverAll(url: string, source: string) {
  for (let n = 0; n < EVENTS; n++) {
    const body = JSON.stringify({ type: 'invoice.paid', data: { object: { customer: 'cus_busy', n } } })
    const response = await fetch(`${url}/webhooks/${source}`, {
      method: 'POST',
      body,
      headers: signedHeaders(body, { id: `${source}_${n}` }),
    })
    expect(response.status).toBe(200)
  }
}

function arrivalOrder(received: ReadonlyArray<{ body: string }>): number[] {
  return received.map((r) => (JSON.parse(r.body) as { data: { object: { n: number } } }).data.object.n)
}

const inOrder = Array.from({ length: EVENTS }, (_, n) => n)

describe('ordering keys hand off', () => {
  for (const queue of ['bullmq', 'in-process'] as const) {
    it(`${queue}: ${EVENTS} events of one key to a 5 ms destination, on the source's key: all delivered in received order within 20 s`, async () => {
      const sink = await startSink(async () => {
        await pause(5)
        return { status: 200 }
      })
      t.closeAfter(sink.close)
      const source = `src_${queue.replace('-', '_')}`
      const service = await t.start({
        inProcessQueue: queue === 'in-process',
        config: config({
          id: source,
          orderingKey: '/data/object/customer',
          handler: { type: 'forward', url: sink.url },
        }),
      })
      const started = Date.now()
      await deliverAll(service.url, source)
      console.log(`${queue}: sent in ${Date.now() - started} ms`)
      await expect
        .poll(() => statusCounts(t.database.sql, source), {
          timeout: 20_000 - (Date.now() - started),
          interval: 200,
        })
        .toEqual({ done: EVENTS })
      expect(arrivalOrder(sink.received)).toEqual(inOrder)
      console.log(`${queue}, source key: ${EVENTS} events done in ${Date.now() - started} ms`)
    }, 60_000)
  }

  it(`bullmq: ${EVENTS} events of one key on a route's key: all delivered in received order within 20 s`, async () => {
    const sink = await startSink(async () => {
      await pause(5)
      return { status: 200 }
    })
    t.closeAfter(sink.close)
    const service = await t.start({
      config: config({
        id: 'routed',
        routes: [{ id: 'ledger', orderingKey: '/data/object/customer', forward: { url: sink.url } }],
      }),
    })
    const started = Date.now()
    await deliverAll(service.url, 'routed')
    await expect
      .poll(() => statusCounts(t.database.sql, 'routed'), {
        timeout: 20_000 - (Date.now() - started),
        interval: 200,
      })
      .toEqual({ done: EVENTS })
    expect(arrivalOrder(sink.received)).toEqual(inOrder)
    console.log(`bullmq, route key: ${EVENTS} events done in ${Date.now() - started} ms`)
  }, 60_000)
})
