import { describe, expect, it } from 'vitest'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { defineTool } from '../../src/outbound/tools.js'
import { buildConfig } from '../../src/service/config.js'
import { statusCounts, useDeliveryTest } from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// Every id the spec allows must be forwarded: Standard Webhooks ids are 1-255 characters, and the
// operation keys derived from them (`<source>:<id>:route:<route>`, a code route's steps) have a
// 255-character limit of their own. A 1,000-character dedup key part too.

const t = useDeliveryTest()

const verify = { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }

async function post(url: string, source: string, id: string, body: string) {
  const response = await fetch(`${url}/webhooks/${source}`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  return ((await response.json()) as { status: string }).status
}

describe('keys that fit', () => {
  it('forwards a 255-character webhook-id once through a forward handler, routes and a code route', async () => {
    const sinks = await Promise.all([0, 1, 2].map(() => startSink(() => ({ status: 200 }))))
    t.closeAfter(...sinks.map((sink) => sink.close))
    const [forwarded, routed, keyed] = sinks.map((sink) => sink.url) as [string, string, string]
    let recorded = 0
    const record = defineTool<{ eventId: string }, string>({
      name: 'record',
      effect: 'idempotent',
      async execute() {
        recorded += 1
        return { kind: 'success', result: 'ok' }
      },
    })
    const audit: EventHandler = async ({ eventId, invoke }) => {
      const outcome = await invoke(record, 'record', { eventId })
      if (outcome.kind !== 'completed') throw new Error(`record: ${outcome.kind}`)
    }
    const config = buildConfig(
      {
        sources: [
          { id: 'acme', verify, handler: { type: 'forward', url: forwarded } },
          {
            id: 'shop',
            verify,
            routes: [
              { id: 'billing', forward: { url: routed } },
              { id: 'audit', handler: 'audit' },
            ],
          },
          {
            id: 'keyed',
            verify,
            handler: { type: 'forward', url: keyed },
            dedupKey: { parts: [{ pointer: '/ref' }] },
          },
        ],
        worker: FAST_WORKER,
        relay: FAST_RELAY,
      },
      () => undefined,
    )
    const service = await t.start({ config, handlers: { audit }, tools: [record] })
    const id = `msg_${'x'.repeat(251)}`
    expect(id).toHaveLength(255)
    const body = JSON.stringify({ type: 'order.paid', ref: 'r'.repeat(1000) })
    for (const source of ['acme', 'shop', 'keyed']) {
      expect(await post(service.url, source, id, body)).toBe('accepted')
      // The provider's retry of the same delivery: a duplicate, never a second forward.
      expect(await post(service.url, source, id, body)).toBe('duplicate')
    }
    for (const source of ['acme', 'shop', 'keyed']) {
      await expect.poll(() => statusCounts(t.database.sql, source), { timeout: 15_000 }).toEqual({ done: 1 })
    }
    for (const sink of sinks) {
      expect(sink.received).toHaveLength(1)
      expect(sink.received[0]?.body).toBe(body)
    }
    expect(recorded).toBe(1)
    // The forward went out under the same `webhook-id`-style identity it was received with.
    expect(sinks[0]?.received[0]?.headers['idempotency-key']).toBe(`acme:${id}`)
    const keys = await t.database.sql<Array<{ operation_key: string; status: string }>>`
      select operation_key, status::text from operations order by operation_key`
    for (const row of keys) expect(row.operation_key.length).toBeLessThanOrEqual(255)
    // The sources' own forwards (acme, keyed) write no operation; the routes' keys are shortened.
    expect(keys.map((row) => row.status)).toEqual(['completed', 'completed'])
    expect(keys.map((row) => row.operation_key.replace(/%h[\w-]{43}/, '%h…'))).toEqual([
      'shop:%h…:route:audit:record',
      'shop:%h…:route:billing',
    ])
  })
})
