import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import { HandlerError } from '../../src/queue/handler.js'
import { buildConfig } from '../../src/service/config.js'
import { seedPendingApproval } from '../admin/seed.js'
import { deliverEvent, useDeliveryTest } from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// Windows start at multiples of their length since the epoch: with the default hour, a run across a
// full hour (CI once ran one at 06:00 UTC) alerted every condition again in the new window. With 30
// days, one run in ~30,000 meets a boundary.
const ALERT_WINDOW_MS = 30 * 24 * 60 * 60 * 1000

const ALERT_SECRET = 'whsec_YWxlcnRzLXNpZ25lZC1ieS1ob29rbGVkZ2VyLWZvci10ZXN0cw=='
const ADMIN_URL = 'https://hooks.example.test'

const t = useDeliveryTest()

interface Received {
  verified: boolean
  headers: IncomingHttpHeaders
  body: string
  answered: number
}

/** A receiver that verifies each alert's Standard Webhooks signature and turns away every first try. */
async function startAlertReceiver(verifyWith: string | undefined) {
  const received: Received[] = []
  const seenIds = new Set<string>()
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      let verified = false
      if (verifyWith !== undefined) {
        try {
          new Webhook(verifyWith).verify(body, request.headers as Record<string, string>)
          verified = true
        } catch {
          verified = false
        }
      }
      const id = String(request.headers['webhook-id'] ?? body)
      // The first delivery of each alert fails: the ledger must retry it, under the same id.
      const answered = verifyWith !== undefined && !verified ? 401 : seenIds.has(id) ? 200 : 503
      seenIds.add(id)
      received.push({ verified, headers: request.headers, body, answered })
      response.writeHead(answered).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.closeAfter(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/alerts`, received }
}

const verify = { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }
const ALL_CONDITIONS = [
  'approval_waiting',
  'circuit_open',
  'event_failed',
  'needs_reconciliation',
  'oldest_pending',
  'pending_backlog',
  'route_disabled',
]

describe('alerts', () => {
  it('each condition reaches a verifying webhook receiver and a Slack-compatible one once per window, with retries', async () => {
    const webhook = await startAlertReceiver(ALERT_SECRET)
    const slack = await startAlertReceiver(undefined)
    const gone = await startSink(() => ({ status: 410 }))
    const down = await startSink(() => ({ status: 503 }))
    t.closeAfter(gone.close, down.close)
    const service = await t.start({
      env: { ALERT_SECRET },
      config: buildConfig(
        {
          sources: [
            { id: 'gone', verify, routes: [{ id: 'old', forward: { url: gone.url } }] },
            {
              id: 'down',
              verify,
              routes: [
                {
                  id: 'api',
                  forward: { url: down.url, circuitBreaker: { failureThreshold: 1, coolDownMs: 600_000 } },
                },
              ],
            },
            { id: 'crash', verify, routes: [{ id: 'code', handler: 'always-fails' }] },
          ],
          worker: { ...FAST_WORKER, maxAttempts: 2 },
          relay: FAST_RELAY,
          alerts: {
            adminUrl: ADMIN_URL,
            windowMs: ALERT_WINDOW_MS,
            checkIntervalMs: 200,
            channels: [
              { type: 'webhook', id: 'ops', url: webhook.url, secret: 'env:ALERT_SECRET' },
              { type: 'slack', id: 'chat', url: slack.url },
            ],
            conditions: {
              needsReconciliationMs: 0,
              approvalWaitingMs: 1000,
              pendingBacklog: 2,
              oldestPendingMs: 1500,
            },
          },
        },
        (name) => (name === 'ALERT_SECRET' ? ALERT_SECRET : undefined),
      ),
      handlers: {
        'always-fails': async () => {
          throw new HandlerError('the ledger route refuses this event')
        },
      },
    })
    const url = service.url
    await deliverEvent(url, 'gone', 'evt_alert_gone_1')
    await deliverEvent(url, 'gone', 'evt_alert_gone_2')
    await deliverEvent(url, 'down', 'evt_alert_down_1')
    await deliverEvent(url, 'crash', 'evt_alert_crash_1')
    await deliverEvent(url, 'crash', 'evt_alert_crash_2')
    const { approvalId } = await seedPendingApproval(t.database.db, 'alerts-test:charge', { amount: 5 })
    await t.database
      .sql`update approvals set created_at = now() - interval '2 hours' where id = ${approvalId}`
    await t.database.sql`
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status, attempts, last_error)
      values ('alerts-test:ship', 'ship', 'irreversible', 'x', '{}', 'needs_reconciliation', 1, 'socket hang up')`

    const delivered = (receiver: { received: Received[] }) =>
      receiver.received.filter((r) => r.answered === 200).map((r) => JSON.parse(r.body))
    await expect
      .poll(() => [...new Set(delivered(webhook).map((alert) => alert.data.condition))].sort(), {
        timeout: 30_000,
        interval: 250,
      })
      .toEqual(ALL_CONDITIONS)
    await expect.poll(() => delivered(slack).length, { timeout: 15_000 }).toBe(ALL_CONDITIONS.length)
    // Ten more checks of the same window: nothing is sent again.
    await new Promise((resolve) => setTimeout(resolve, 2000))

    expect(webhook.received.every((r) => r.verified)).toBe(true)
    const alerts = delivered(webhook)
    expect(alerts.map((alert) => alert.data.condition).sort()).toEqual(ALL_CONDITIONS)
    for (const alert of alerts) {
      expect(alert.type).toBe(`hookledger.alert.${alert.data.condition}`)
      expect(alert.data.link.startsWith(`${ADMIN_URL}/admin`)).toBe(true)
    }
    const byCondition = Object.fromEntries(alerts.map((alert) => [alert.data.condition, alert.data]))
    expect(byCondition.route_disabled).toMatchObject({
      subject: 'gone/old',
      link: `${ADMIN_URL}/admin/routes`,
    })
    expect(byCondition.circuit_open).toMatchObject({ subject: 'down/api' })
    expect(byCondition.event_failed).toMatchObject({
      subject: 'crash',
      link: `${ADMIN_URL}/admin/events?source=crash&status=failed`,
    })
    // One alert for the source, whether the check saw one or both of its events FAILED by then.
    expect(byCondition.event_failed.summary).toMatch(/^[12] event\(s\) of source 'crash' FAILED/)
    // Every alert was refused once and sent again under the same webhook-id.
    const ids = webhook.received.map((r) => String(r.headers['webhook-id']))
    expect(ids).toHaveLength(ALL_CONDITIONS.length * 2)
    expect(new Set(ids).size).toBe(ALL_CONDITIONS.length)
    expect(slack.received).toHaveLength(ALL_CONDITIONS.length * 2)
    const texts = delivered(slack).map((message) => message.text as string)
    expect(texts.some((text) => text.includes('Route gone/old is disabled'))).toBe(true)
    expect(texts.every((text) => text.includes(`<${ADMIN_URL}/admin`))).toBe(true)
    // Nothing FAILED but the events of the failing code route.
    const failed = await t.database
      .sql`select source from inbound_events where status = 'failed' order by source`
    expect(failed.map((row) => row.source)).toEqual(['crash', 'crash'])
  }, 90_000)

  it('refuses a webhook channel whose secret is not a Standard Webhooks secret, at start-up', () => {
    const withSecret = (secret: string) => () =>
      buildConfig(
        {
          sources: [{ id: 'a', verify, routes: [{ id: 'r', forward: { url: 'http://127.0.0.1:9/' } }] }],
          alerts: { channels: [{ type: 'webhook', id: 'ops', url: 'http://127.0.0.1:9/', secret }] },
        },
        () => undefined,
      )
    expect(withSecret('env:MISSING')).toThrow(
      /alerts channel 'ops': secret: environment variable MISSING is not set/,
    )
    expect(withSecret('whsec_!!')).toThrow(/alerts channel 'ops': secret: must be a Standard Webhooks secret/)
  })
})

describe('alert text', () => {
  it('escapes what it did not write in a Slack message: no disguised link, no @channel', async () => {
    const slack = await startSink(() => ({ status: 200 }))
    t.closeAfter(slack.close)
    await t.start({
      config: buildConfig(
        {
          sources: [{ id: 'quiet', verify, routes: [{ id: 'r', forward: { url: slack.url } }] }],
          worker: FAST_WORKER,
          relay: FAST_RELAY,
          alerts: {
            adminUrl: ADMIN_URL,
            windowMs: ALERT_WINDOW_MS,
            checkIntervalMs: 200,
            // A channel of its own: the first test's alerts of this window went to 'chat' already.
            channels: [{ type: 'slack', id: 'escaped', url: slack.url }],
            conditions: {
              eventFailed: false,
              routeDisabled: false,
              circuitOpen: false,
              needsReconciliationMs: 0,
              approvalWaitingMs: null,
              pendingBacklog: null,
              oldestPendingMs: null,
            },
          },
        },
        () => undefined,
      ),
    })
    // An agent chooses its operation keys; this one is markup aimed at whoever reads the alert.
    const key = 'refund-42 <https://evil.example/login|Open the admin page> <!channel> & <!here>'
    await t.database.sql`
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status, attempts, updated_at)
      values (${key}, 'refund', 'irreversible', 'x', '{}', 'needs_reconciliation', 1, now() - interval '1 day')`
    await expect.poll(() => slack.received.length, { timeout: 15_000 }).toBeGreaterThan(0)
    const text = (JSON.parse(slack.received[0]?.body ?? '{}') as { text: string }).text
    expect(text).toContain(
      'refund-42 &lt;https://evil.example/login|Open the admin page&gt; &lt;!channel&gt; &amp; &lt;!here&gt;',
    )
    // The one piece of markup is the link this server wrote.
    expect(text.match(/[<>]/g)).toEqual(['<', '>'])
    expect(text).toContain(`<${ADMIN_URL}/admin/operations?status=needs_reconciliation|Open the admin page>`)
  }, 30_000)
})
