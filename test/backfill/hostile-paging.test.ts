import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runBackfillPass } from '../../src/backfill/pass.js'
import type { Config, Source } from '../../src/config/config.js'
import { createLogger } from '../../src/logger.js'
import { buildConfig } from '../../src/service/config.js'
import { type HostileProvider, startHostileProvider } from '../support/hostile-provider.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'

// A provider API that holds a pass hostage by time or by paging: a body that trickles after fast
// headers, and a list that answers has_more with the same cursor for ever. Each pass must end on its
// own, with a specific error, and the stuck list must reach a person as an alert.

const API_KEY = 'sk_test_hostile_paging_key'
const ALERT_SECRET = 'whsec_aG9zdGlsZS1wYWdpbmctYWxlcnRzLWZvci10ZXN0cw=='
const logger = createLogger('silent')

let trickle: HostileProvider
let circular: HostileProvider
let running: TestService
let config: Config
const alerts: Array<{ type: string; data: { condition: string; subject: string; summary: string } }> = []
let closeAlerts: () => Promise<void>

const sourceOf = (id: string): Source => {
  const source = config.sources.get(id)
  if (source === undefined) throw new Error(`no source ${id}`)
  return source
}

const event = (id: string, copy: number) => ({
  id,
  object: 'event',
  type: 'invoice.paid',
  created: Math.floor(Date.now() / 1000) - 60,
  // Each copy carries another body, as a provider replaying a page might: a claim of the copy is a
  // row in inbound_conflicts.
  data: { object: { id: `in_${id}`, copy } },
})

beforeAll(async () => {
  trickle = await startHostileProvider()
  circular = await startHostileProvider()
  const alertServer = createServer((request, response) => {
    let body = ''
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString()
    })
    request.on('end', () => {
      alerts.push(JSON.parse(body))
      response.writeHead(200).end()
    })
  })
  await new Promise<void>((resolve) => alertServer.listen(0, '127.0.0.1', resolve))
  closeAlerts = () => new Promise<void>((resolve) => alertServer.close(() => resolve()))
  const source = (id: string, baseUrl: string, backfill: Record<string, unknown>) => ({
    id,
    verify: { scheme: 'stripe', secrets: ['whsec_hostile_paging'] },
    handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
    backfill: { credential: 'env:STRIPE_API_KEY', apiBaseUrl: baseUrl, pageSize: 2, ...backfill },
  })
  config = buildConfig(
    {
      sources: [
        source('trickle', trickle.baseUrl, { enabled: false, requestTimeoutSeconds: 2 }),
        // Run by hand below.
        source('circular', circular.baseUrl, { enabled: false }),
        // Run by the service's loop every second, on the same endless list.
        source('looped', circular.baseUrl, { intervalSeconds: 1 }),
      ],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
      alerts: {
        checkIntervalMs: 200,
        channels: [
          {
            type: 'webhook',
            id: 'ops',
            url: `http://127.0.0.1:${(alertServer.address() as AddressInfo).port}/alerts`,
            secret: ALERT_SECRET,
          },
        ],
      },
    },
    (name) => (name === 'STRIPE_API_KEY' ? API_KEY : undefined),
  )
  circular.handle((_request, response, record) => {
    const copy = circular.requests.indexOf(record)
    response.writeHead(200, { 'content-type': 'application/json' })
    response.end(
      JSON.stringify({
        object: 'list',
        url: '/v1/events',
        has_more: true,
        data: [event('evt_circle_a', copy), event('evt_circle_b', copy)],
      }),
    )
  })
  running = await startTestService({ config })
})

afterAll(async () => {
  await running?.close()
  await closeAlerts?.()
  await trickle?.close()
  await circular?.close()
})

describe('a provider API that holds a pass hostage', () => {
  it('closes a body that trickles a byte a second at the request deadline, and ends the pass after its retries', async () => {
    trickle.handle((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write('{"object":"list",')
      const timer = setInterval(() => response.write(' '), 1000)
      response.once('close', () => clearInterval(timer))
    })
    const started = Date.now()
    let hangCheck: NodeJS.Timeout | undefined
    // A hang check, not a timing: if the pass never ends, say where its requests stood.
    const hung = new Promise<never>((_resolve, reject) => {
      hangCheck = setTimeout(() => {
        const since = (at: number | undefined) => (at === undefined ? 'open' : `${at - started} ms`)
        const requests = trickle.requests.map(
          (r) => `started ${since(r.startedAt)}, closed ${since(r.closedAt)}`,
        )
        reject(new Error(`the pass did not end within 40 s; its requests: ${requests.join('; ')}`))
      }, 40_000)
    })
    const report = await Promise.race([
      runBackfillPass({ sql: running.database.sql, logger }, sourceOf('trickle')),
      hung,
    ]).finally(() => clearTimeout(hangCheck))
    const seconds = (Date.now() - started) / 1000

    expect(report.error).toEqual({
      code: 'provider_unavailable',
      message:
        'Stripe API did not answer in full within 2 s (backfill.requestTimeoutSeconds) to GET /v1/events, 4 times; the next pass resumes from here',
    })
    expect(report.pages).toBe(0)
    // Four attempts of 2 s each, and the backoff between them (250 ms, 500 ms, 1 s).
    expect(trickle.requests).toHaveLength(4)
    expect(seconds).toBeGreaterThan(8)
    expect(seconds).toBeLessThan(15)
    for (const request of trickle.requests) {
      // The client hung up at its deadline, well before the body would have ended (it never does).
      // The server sees the request start a little after the client's deadline started, more so on
      // a loaded machine: so the bound below the 2 s deadline is loose.
      const open = (request.closedAt ?? Number.POSITIVE_INFINITY) - request.startedAt
      expect(open).toBeGreaterThanOrEqual(1500)
      // (A loaded machine may see the close late; a body left open would stay open for ever.)
      expect(open).toBeLessThan(5000)
    }
    console.info(
      `trickling body: the pass ended after ${seconds.toFixed(1)} s, ${trickle.requests.length} requests`,
    )
  }, 60_000)

  it('stops a list that repeats its cursor with stuck_cursor before claiming it again, and raises backfill_stuck', async () => {
    const first = await runBackfillPass({ sql: running.database.sql, logger }, sourceOf('circular'))
    expect(first.error?.code).toBe('stuck_cursor')
    expect(first.error?.message).toMatch(
      /^Stripe answered page 2 of this pass with the same 2 item\(s\) as page 1 \(first evt_circle_a\): its paging goes round in circles; the pass stopped before claiming the page again$/,
    )
    expect(first.pages).toBe(1)
    expect(first.claimed).toHaveLength(2)

    // The next pass resumes after the last page that moved (evt_circle_b), and is handed it again.
    const second = await runBackfillPass({ sql: running.database.sql, logger }, sourceOf('circular'))
    expect(second.resumedAfter).toBe('evt_circle_b')
    expect(second.error).toEqual({
      code: 'stuck_cursor',
      message:
        'Stripe answered page 1 of this pass with a next-page cursor this pass already followed (evt_circle_b): its paging goes round in circles; the pass stopped there',
    })
    expect(second.pages).toBe(0)

    const [cursor] = await running.database.sql`
      select last_error_code, sweep_resume from backfill_cursors where source = 'circular'`
    expect(cursor).toEqual({ last_error_code: 'stuck_cursor', sweep_resume: 'evt_circle_b' })

    // The person is told, once per source and window: the pass run by hand, and the loop's.
    // (The claimed events FAILED on their way to an unused port: those alerts are another condition.)
    const stuckAlerts = () => alerts.filter((alert) => alert.data.condition === 'backfill_stuck')
    await expect
      .poll(
        () =>
          stuckAlerts()
            .map((alert) => alert.data.subject)
            .sort(),
        { timeout: 15_000 },
      )
      .toEqual(['circular', 'looped'])
    const circularAlert = stuckAlerts().find((alert) => alert.data.subject === 'circular')
    expect(circularAlert?.type).toBe('hookledger.alert.backfill_stuck')
    expect(circularAlert?.data.summary).toContain(
      "Backfill of source 'circular' is stuck: its last pass stopped with stuck_cursor: Stripe answered page ",
    )

    // Copies of a page are never claimed: no conflict records pile up, however many passes run.
    const [conflicts] = await running.database.sql`select count(*)::int as n from inbound_conflicts`
    expect(conflicts?.n).toBe(0)
    const passes = await (await fetch(`${running.url}/metrics`)).text()
    expect(passes).toMatch(/hookledger_backfill_passes_total\{source="looped",result="stuck_cursor"\} [1-9]/)
  }, 60_000)
})
