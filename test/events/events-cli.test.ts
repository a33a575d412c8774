import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { seedEvent } from '../admin/seed.js'
import { deliverEvent } from '../support/delivery.js'
import { startTestService, type TestService } from '../support/service.js'
import { startSink } from '../support/sink.js'
import { forwardingConfig, runCli } from './seed.js'

// `hookledger events list|show|tail|replay` as an operator runs them: the built CLI in a child
// process on the service's ledger database.

const ADMIN_TOKEN = 'admin-token-for-the-events-cli-tests'

let sink: Awaited<ReturnType<typeof startSink>>
let service: TestService
const ids: Record<string, string> = {}

beforeAll(async () => {
  sink = await startSink(() => ({ status: 200 }))
  service = await startTestService({
    config: forwardingConfig(['live'], sink.url),
    env: { ADMIN_TOKEN },
  })
  const db = service.database.db
  const at = (minutes: number) => new Date(Date.now() - minutes * 60_000)
  ids.paid = await seedEvent(db, {
    source: 'shop',
    eventId: 'evt_paid',
    eventType: 'invoice.paid',
    status: 'failed',
    attempts: 3,
    lastError: 'route crm: HTTP 503',
    receivedAt: at(30),
  })
  ids.created = await seedEvent(db, {
    source: 'shop',
    eventId: 'evt_created',
    eventType: 'invoice.created',
    receivedAt: at(20),
  })
  ids.order = await seedEvent(db, {
    source: 'shop',
    eventId: 'evt_order',
    eventType: 'order.created',
    status: 'failed',
    receivedAt: at(300),
  })
  // The same provider id in another source: `show` by event id then needs --source.
  ids.other = await seedEvent(db, { source: 'other', eventId: 'evt_paid', eventType: 'invoice.paid' })
  await service.database.sql`
    insert into event_routes (event_row_id, route_id, status, attempts, last_error, response_status)
    values (${ids.paid}, 'crm', 'failed', 3, 'HTTP 503', 503), (${ids.paid}, 'audit', 'done', 1, null, 200)`
}, 60_000)

afterAll(async () => {
  await service?.close()
  await sink?.close()
})

const cli = (...args: string[]) => runCli(['events', ...args], service.database.url)

describe('hookledger events', () => {
  it('answers --help and -h with its usage and examples, exit 0', async () => {
    for (const args of [['--help'], ['replay', '-h'], ['tail', '--help']]) {
      const run = await cli(...args)
      expect(run.status, args.join(' ')).toBe(0)
      expect(run.stdout).toContain('hookledger events replay [--status failed] [FILTER]')
      expect(run.stdout).toContain(
        'examples:\n  hookledger events list --source stripe --status failed --since 2h',
      )
    }
  })

  it('list: filters by status, type glob, time and route; --json is one object per line', async () => {
    const failedInvoices = await cli('list', '--source', 'shop', '--status', 'failed', '--type', 'invoice.*')
    expect(failedInvoices.status).toBe(0)
    const lines = failedInvoices.stdout.trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toContain(
      `${ids.paid}  shop  evt_paid  invoice.paid  FAILED  attempts 3  route crm: HTTP 503`,
    )
    const recent = await cli('list', '--source', 'shop', '--since', '2h', '--json')
    const events = recent.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { eventId: string })
    // Newest first; evt_order is 5 hours old.
    expect(events.map((e) => e.eventId)).toEqual(['evt_created', 'evt_paid'])
    const byRoute = await cli('list', '--route', 'crm')
    expect(byRoute.stdout.trim().split('\n')).toHaveLength(1)
    expect(byRoute.stdout).toContain('evt_paid')
    expect((await cli('list', '--route', 'audit')).stderr).toBe('no events match\n')
    const limited = await cli('list', '--limit', '2')
    expect(limited.stdout.trim().split('\n')).toHaveLength(2)
    const bad = await cli('list', '--status', 'lost')
    expect(bad.status).toBe(2)
    expect(bad.stderr).toContain("--status must be one of pending, processing, done, failed; got 'lost'")
  })

  it('show: by provider event id (with --source when ambiguous) or row id; routes, attempts, error', async () => {
    const ambiguous = await cli('show', 'evt_paid')
    expect(ambiguous.status).toBe(1)
    expect(ambiguous.stderr).toContain('event id evt_paid is in several sources')
    const text = await cli('show', 'evt_paid', '--source', 'shop')
    expect(text.status).toBe(0)
    expect(text.stdout).toContain('event     shop evt_paid (invoice.paid)')
    expect(text.stdout).toContain('status    FAILED, attempts 3, replays 0')
    expect(text.stdout).toContain('error     route crm: HTTP 503')
    expect(text.stdout).toContain('  crm  FAILED  attempts 3  HTTP 503  HTTP 503')
    expect(text.stdout).toContain('  audit  DONE  attempts 1  HTTP 200')
    const json = JSON.parse((await cli('show', ids.paid ?? '', '--json')).stdout) as {
      event: { eventId: string; status: string; body?: unknown }
      routes: Array<{ routeId: string; status: string }>
    }
    expect(json.event).toMatchObject({ eventId: 'evt_paid', status: 'failed' })
    // The payload and the signed headers stay in the ledger.
    expect(json.event.body).toBeUndefined()
    expect(json.routes.map((r) => [r.routeId, r.status])).toEqual([
      ['audit', 'done'],
      ['crm', 'failed'],
    ])
    const missing = await cli('show', 'evt_nope')
    expect(missing.status).toBe(1)
    expect(missing.stderr).toContain('no event evt_nope')
  })

  it('replay: --dry-run counts only; a status other than failed is refused', async () => {
    const dry = await cli('replay', '--source', 'shop', '--dry-run')
    expect(dry).toMatchObject({ status: 0, stdout: '2 FAILED events match; dry run, nothing replayed\n' })
    const glob = await cli('replay', '--source', 'shop', '--type', 'order.*', '--dry-run')
    expect(glob.stdout).toBe('1 FAILED event match; dry run, nothing replayed\n')
    const done = await cli('replay', '--status', 'done')
    expect(done.status).toBe(2)
    expect(done.stderr).toContain('only FAILED events are replayed')
    const rows = await service.database.sql`select count(*)::int as n from event_replays`
    expect(rows[0]?.n).toBe(0)
  })

  it('POST /admin/api/events/replay: bearer token, the filter (route, type glob), and every bad input named', async () => {
    const replay = async (body: unknown, token = ADMIN_TOKEN) => {
      const response = await fetch(`${service.url}/admin/api/events/replay`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      return { status: response.status, body: (await response.json()) as Record<string, unknown> }
    }
    expect((await replay({ dryRun: true }, 'wrong')).status).toBe(401)
    expect((await replay({ route: 'crm', dryRun: true })).body).toEqual({ dryRun: true, matched: 1 })
    expect((await replay({ route: 'audit', dryRun: true })).body).toEqual({ dryRun: true, matched: 0 })
    expect((await replay({ source: 'shop', type: '*.created', dryRun: true })).body.matched).toBe(1)
    const cases: Array<[unknown, string]> = [
      [{ status: 'done' }, 'status_not_replayable'],
      [{ cursor: 'page-2' }, 'invalid_cursor'],
      [{ sauce: 'shop' }, 'invalid_request'],
      [{ from: '2026-12-04T10:00:00Z', to: '2026-12-04T09:00:00Z' }, 'invalid_request'],
      [{ from: 'yesterday' }, 'invalid_request'],
      [{ limit: 0 }, 'invalid_request'],
    ]
    for (const [body, code] of cases) {
      const answer = await replay(body)
      expect([answer.status, (answer.body.error as { code: string }).code], JSON.stringify(body)).toEqual([
        400,
        code,
      ])
    }
    const rows = await service.database.sql`select count(*)::int as n from event_replays`
    expect(rows[0]?.n).toBe(0)
  })

  it('tail: prints an event delivered after it started, then its outcome; Ctrl-C ends it with 0', async () => {
    let delivered = false
    const run = await runCli(
      ['events', 'tail', '--source', 'live', '--interval-ms', '100'],
      service.database.url,
      {
        timeoutMs: 60_000,
        onSpawn: (child) => {
          let stdout = ''
          child.stderr?.on('data', async (chunk: Buffer) => {
            if (!delivered && chunk.toString().includes('following new events')) {
              delivered = true
              await deliverEvent(service.url, 'live', 'evt_live_1')
            }
          })
          child.stdout?.on('data', (chunk: Buffer) => {
            stdout += chunk.toString()
            if (/<-- .* DONE/.test(stdout)) child.kill('SIGINT')
          })
          return undefined
        },
      },
    )
    expect(run.status, run.stderr).toBe(0)
    const lines = run.stdout.trim().split('\n')
    expect(lines[0]).toMatch(
      /^--> \S+Z {2}[0-9a-f-]{36} {2}live {2}evt_live_1 {2}order\.created {2}(PENDING|PROCESSING|DONE)/,
    )
    expect(lines.at(-1)).toMatch(/^<-- .*live {2}evt_live_1 {2}order\.created {2}DONE {2}attempts 1$/)
    expect(sink.received).toHaveLength(1)
  })
})
