import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { statusCounts } from '../support/delivery.js'
import { serviceHarness } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// An ordering key's hand-off is a speed-up, not what the order stands on: a worker killed between
// the head's DONE and its hand-off leaves the next event to its recheck timer (its delayed job in
// Redis), and the key goes on in order after a restart.

const EVENTS = 5
let sink: Awaited<ReturnType<typeof startSink>>

beforeAll(async () => {
  // The head answers slowly, so every other event of its key is claimed and waiting behind it.
  sink = await startSink(async (_request, index) => {
    if (index === 0) await new Promise((resolve) => setTimeout(resolve, 800))
    return { status: 200 }
  })
})
afterAll(async () => {
  await sink?.close()
})

const harness = serviceHarness({
  folder: 'hookledger-ordering-crash-',
  config: () => ({
    sources: [
      {
        id: 'ordered',
        verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
        orderingKey: '/data/object/customer',
        handler: { type: 'forward', url: sink.url },
      },
    ],
    worker: { handlerTimeoutMs: 3000, leaseMs: 5000, stalledIntervalMs: 1000, backoffBaseMs: 50 },
    relay: { intervalMs: 200, graceMs: 500, orphanAfterMs: 5000 },
    delivery: { orderingRecheckMs: 200, pausedRecheckMs: 500 },
  }),
  env: { LOG_LEVEL: 'warn' },
})

describe('ordering keys across a crash', () => {
  it('killed after the head is DONE and before its hand-off: the rest of the key goes on in order after a restart', async () => {
    const crashing = await harness.startChild({ failpoint: 'worker.after_done' })
    for (let n = 0; n < EVENTS; n++) {
      const body = JSON.stringify({ type: 'invoice.paid', data: { object: { customer: 'cus_1', n } } })
      const response = await fetch(`${crashing.url}/webhooks/ordered`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: `ordered_${n}` }),
      })
      expect(response.status).toBe(200)
    }
    expect(await crashing.exited).toBe('SIGKILL')
    expect(await statusCounts(harness.database.sql, 'ordered')).toEqual({ done: 1, pending: EVENTS - 1 })

    await harness.startChild()
    await expect
      .poll(() => statusCounts(harness.database.sql, 'ordered'), { timeout: 20_000, interval: 200 })
      .toEqual({ done: EVENTS })
    const arrivals = sink.received.map(
      (r) => (JSON.parse(r.body) as { data: { object: { n: number } } }).data.object.n,
    )
    expect(arrivals).toEqual(Array.from({ length: EVENTS }, (_, n) => n))
  }, 60_000)
})
