import { describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { buildConfig } from '../../src/service/config.js'
import { statusCounts, useDeliveryTest } from '../support/delivery.js'
import { captureLogs } from '../support/log-capture.js'
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

/** Senders at once: the received order is the claims' (received_seq), read back from the ledger. */
const SENDERS = 4

async function deliverAll(url: string, source: string) {
  let next = 0
  const sender = async () => {
    while (next < EVENTS) {
      const n = next++
      const body = JSON.stringify({ type: 'invoice.paid', data: { object: { customer: 'cus_busy', n } } })
      const response = await fetch(`${url}/webhooks/${source}`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: `${source}_${n}` }),
      })
      expect(response.status).toBe(200)
    }
  }
  await Promise.all(Array.from({ length: SENDERS }, sender))
}

function arrivalOrder(received: ReadonlyArray<{ body: string }>): number[] {
  return received.map((r) => (JSON.parse(r.body) as { data: { object: { n: number } } }).data.object.n)
}

async function receivedOrder(source: string): Promise<number[]> {
  const rows = await t.database.sql<Array<{ body: Buffer }>>`
    select p.body from inbound_events e join inbound_event_payloads p on p.event_row_id = e.id
    where e.source = ${source} order by e.received_seq`
  return arrivalOrder(rows.map((row) => ({ body: row.body.toString('utf8') })))
}

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
      expect(arrivalOrder(sink.received)).toEqual(await receivedOrder(source))
      console.log(`${queue}, source key: ${EVENTS} events done in ${Date.now() - started} ms`)
    }, 60_000)
  }

  it(`bullmq: ${EVENTS} events of one key on a route's key: all delivered in received order within 20 s`, async () => {
    const sink = await startSink(async () => {
      await pause(5)
      return { status: 200 }
    })
    t.closeAfter(sink.close)
    const logs = captureLogs('info')
    const service = await t.start({
      logger: logs.logger,
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
    expect(arrivalOrder(sink.received)).toEqual(await receivedOrder('routed'))
    console.log(`bullmq, route key: ${EVENTS} events done in ${Date.now() - started} ms`)
    // Each recheck is logged at debug; at info, one line per key and minute (this test is shorter).
    const info = logs.entries().filter((entry) => entry.level === 30)
    expect(info.filter((entry) => String(entry.msg).includes('waits for event'))).toEqual([])
    const summaries = info.filter((entry) => String(entry.msg).startsWith('ordering key held'))
    expect(summaries).toHaveLength(1)
    expect(JSON.stringify(summaries)).not.toContain('cus_busy')
  }, 60_000)
})
