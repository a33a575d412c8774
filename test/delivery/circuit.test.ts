import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { buildConfig } from '../../src/service/config.js'
import {
  adminCookie,
  deliverEvent,
  enableOnAdminPage,
  metricLine as metric,
  statusCounts,
  useDeliveryTest,
} from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER, startTestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

const run = promisify(execFile)
const ADMIN_TOKEN = 'admin-token-for-the-circuit-tests'

const t = useDeliveryTest()

function config(source: string, routes: unknown[], extra: Record<string, unknown> = {}): Config {
  return buildConfig(
    {
      sources: [{ id: source, verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }, routes }],
      worker: { ...FAST_WORKER, maxAttempts: 8 },
      relay: FAST_RELAY,
      ...extra,
    },
    () => undefined,
  )
}

const statuses = (source: string) => statusCounts(t.database.sql, source)

describe('circuit breaker', () => {
  it('opens after consecutive failures, stops spending attempts, and closes when the destination recovers', async () => {
    let healthy = false
    const destination = await startSink(() => ({ status: healthy ? 200 : 503 }))
    t.closeAfter(destination.close)
    const service = await t.start({
      config: config('cb', [
        {
          id: 'flaky',
          forward: { url: destination.url, circuitBreaker: { failureThreshold: 3, coolDownMs: 1500 } },
        },
      ]),
    })
    const url = service.url
    await Promise.all(Array.from({ length: 10 }, (_, i) => deliverEvent(url, 'cb', `evt_cb_${i}`)))
    await expect
      .poll(() => metric(url, 'hookledger_destination_circuit_open{destination="cb/flaky"}'), {
        timeout: 15_000,
      })
      .toBe('hookledger_destination_circuit_open{destination="cb/flaky"} 1')
    const atOpen = destination.received.length
    // Open: the ten events wait for the circuit. Only a half-open probe per cool-down reaches the
    // destination, where without the breaker each would spend its 8 attempts within a second or two.
    await new Promise((resolve) => setTimeout(resolve, 4000))
    const whileOpen = destination.received.length - atOpen
    expect(whileOpen).toBeLessThanOrEqual(3)
    expect((await statuses('cb')).failed).toBeUndefined()
    // Each attempt spent is a send that reached the destination: waiting on the circuit spent none.
    const [spent] = await t.database.sql<Array<{ n: number }>>`
      select count(*)::int as n from event_attempts a join inbound_events e on e.id = a.event_row_id
      where e.source = 'cb' and a.outcome = 'error'`
    expect(spent?.n).toBeLessThanOrEqual(destination.received.length)
    expect(destination.received.length).toBeLessThanOrEqual(12)

    healthy = true
    await expect.poll(() => statuses('cb'), { timeout: 20_000 }).toEqual({ done: 10 })
    expect(await metric(url, 'hookledger_destination_circuit_open{destination="cb/flaky"}')).toBe(
      'hookledger_destination_circuit_open{destination="cb/flaky"} 0',
    )
    expect(await metric(url, 'hookledger_destination_consecutive_failures{destination="cb/flaky"}')).toBe(
      'hookledger_destination_consecutive_failures{destination="cb/flaky"} 0',
    )
  }, 60_000)
})

describe('410 Gone', () => {
  it('disables the route: its deliveries pause, nothing is FAILED, and a person re-enables it', async () => {
    let gone = true
    const destination = await startSink(() => ({ status: gone ? 410 : 200 }))
    const other = await startSink(() => ({ status: 200 }))
    t.closeAfter(destination.close, other.close)
    const service = await t.start({
      env: { ADMIN_TOKEN },
      config: config(
        'gone',
        [
          { id: 'old', forward: { url: destination.url } },
          { id: 'other', forward: { url: other.url } },
        ],
        { delivery: { pausedRecheckMs: 300 } },
      ),
    })
    const url = service.url
    await deliverEvent(url, 'gone', 'evt_gone_1')
    await expect
      .poll(() => t.database.sql`select source, route_id, reason from disabled_routes`, { timeout: 15_000 })
      .toEqual([{ source: 'gone', route_id: 'old', reason: `${destination.url} answered 410 Gone` }])
    await deliverEvent(url, 'gone', 'evt_gone_2')
    await expect.poll(() => other.received.length, { timeout: 15_000 }).toBe(2)
    // Paused, rechecked every 300 ms for a second and a half: no FAILED event, no attempt used up,
    // and the disabled destination is not sent anything more.
    await new Promise((resolve) => setTimeout(resolve, 1500))
    expect(destination.received).toHaveLength(1)
    // Each recheck leases the paused row for a moment (PROCESSING); between rechecks both are PENDING.
    await expect.poll(() => statuses('gone'), { timeout: 2000, interval: 50 }).toEqual({ pending: 2 })
    const routes = await t.database.sql<Array<{ route_id: string; status: string }>>`
      select route_id, r.status::text from event_routes r join inbound_events e on e.id = r.event_row_id
      where e.source = 'gone' order by e.event_id, route_id`
    expect(routes.map((r) => `${r.route_id}:${r.status}`)).toEqual([
      'old:paused',
      'other:done',
      'old:paused',
      'other:done',
    ])
    const [attempts] = await t.database.sql<Array<{ n: number }>>`
      select count(*)::int as n from event_attempts a join inbound_events e on e.id = a.event_row_id
      where e.source = 'gone' and a.outcome = 'error'`
    expect(attempts?.n).toBe(0)

    // The admin page shows it disabled, with an Enable button.
    const cookie = await adminCookie(url, ADMIN_TOKEN)
    const routesPage = await (await fetch(`${url}/admin/routes`, { headers: { cookie } })).text()
    expect(routesPage).toContain('gone/old')
    expect(routesPage).toContain(`${destination.url} answered 410 Gone`)
    expect(routesPage).toContain('action="/admin/routes/gone/old/enable"')

    // The CLI lists it and re-enables it; the paused deliveries go out.
    const env = { ...process.env, DATABASE_URL: t.database.url, LOG_LEVEL: 'silent' }
    const listed = await run(process.execPath, ['bin/hookledger.js', 'routes', 'disabled'], { env })
    expect(listed.stdout).toContain(`gone/old  since `)
    gone = false
    const enabled = await run(process.execPath, ['bin/hookledger.js', 'routes', 'enable', 'gone', 'old'], {
      env,
    })
    expect(enabled.stdout).toContain('gone/old enabled')
    await expect.poll(() => statuses('gone'), { timeout: 15_000 }).toEqual({ done: 2 })
    expect(destination.received).toHaveLength(3)
    expect(other.received).toHaveLength(2)
    await expect(
      run(process.execPath, ['bin/hookledger.js', 'routes', 'enable', 'gone', 'old'], { env }),
    ).rejects.toMatchObject({ stderr: expect.stringContaining('route gone/old is not disabled') })
  }, 60_000)

  it('re-enabling resumes a paused delivery at once, not at its recheck a minute later', async () => {
    // An api process and a worker process, and one event: the api gives the row a job of its own id,
    // which the worker moves to the delayed set for the recheck, and an add under that id would be
    // ignored (rows resumed together go out in a job of a fresh id either way).
    let gone = true
    const destination = await startSink(() => ({ status: gone ? 410 : 200 }))
    t.closeAfter(destination.close)
    const resumeConfig = config('resume', [{ id: 'crm', forward: { url: destination.url } }], {
      delivery: { pausedRecheckMs: 60_000 },
    })
    const service = await t.start({ role: 'api', config: resumeConfig })
    const worker = await startTestService({ role: 'worker', config: resumeConfig, database: t.database })
    t.closeAfter(worker.close)
    await deliverEvent(service.url, 'resume', 'evt_resume')
    await expect
      .poll(
        () => t.database.sql`
          select r.status::text, e.next_attempt_at > now() + interval '30 seconds' as later
          from event_routes r join inbound_events e on e.id = r.event_row_id
          where e.source = 'resume' and e.status = 'pending'`,
        { timeout: 15_000 },
      )
      .toEqual([{ status: 'paused', later: true }])
    expect(destination.received).toHaveLength(1)

    gone = false
    const env = { ...process.env, DATABASE_URL: t.database.url, LOG_LEVEL: 'silent' }
    const enabled = await run(process.execPath, ['bin/hookledger.js', 'routes', 'enable', 'resume', 'crm'], {
      env,
    })
    expect(enabled.stdout).toContain('resume/crm enabled: 1 paused delivery goes out now')
    // Well inside the minute the paused delivery waits for its recheck.
    await expect.poll(() => statuses('resume'), { timeout: 15_000 }).toEqual({ done: 1 })
    expect(destination.received).toHaveLength(2)
  }, 60_000)

  it('re-enables from the admin page', async () => {
    await t.database
      .sql`insert into disabled_routes (source, route_id, reason) values ('gone2', 'old', 'test')`
    const service = await t.start({
      env: { ADMIN_TOKEN },
      config: config('gone2', [{ id: 'old', forward: { url: 'http://127.0.0.1:9/unused' } }]),
    })
    const url = service.url
    const enabled = await enableOnAdminPage(url, await adminCookie(url, ADMIN_TOKEN), 'gone2', 'old')
    expect(enabled.status).toBe(303)
    expect(await t.database.sql`select * from disabled_routes`).toEqual([])
    expect(enabled.page).toContain('gone2/old enabled: no paused deliveries were waiting.')
  })
})
