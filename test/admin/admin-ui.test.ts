import { Worker } from 'bullmq'
import { eq } from 'drizzle-orm'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { approvals, operations } from '../../src/db/outbound-schema.js'
import { eventReplays, inboundEvents } from '../../src/db/schema.js'
import { SESSION_TTL_MS } from '../../src/http/admin-ui/session.js'
import { PROCESS_EVENT, processEventJobId } from '../../src/queue/jobs.js'
import { seedFailedEvents } from '../events/seed.js'
import { testRedisUrl } from '../support/env.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'
import { seedEvent, seedPendingApproval } from './seed.js'

const TOKEN = 'admin-token-for-the-admin-ui-tests'
const ORIGIN = 'http://localhost'

let stack: ApiStack
let off: ApiStack

beforeAll(async () => {
  stack = await createApiStack(testConfig(), { adminToken: TOKEN, dashboard: true })
  off = await createApiStack(testConfig())
})
afterAll(async () => {
  await stack.close()
  await off.close()
})

type Fields = Record<string, string>

function post(app: ApiStack['app'], path: string, fields: Fields, headers: Record<string, string> = {}) {
  return app.request(path, {
    method: 'POST',
    body: new URLSearchParams(fields),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: ORIGIN, ...headers },
  })
}

async function login(name = 'ana'): Promise<string> {
  const response = await post(stack.app, '/admin/login', { name, token: TOKEN, next: '/admin/events' })
  expect(response.status).toBe(303)
  const cookie = response.headers.get('set-cookie') ?? ''
  return cookie.split(';')[0] ?? ''
}

async function page(path: string, cookie: string) {
  const response = await stack.app.request(path, { headers: { cookie } })
  return { status: response.status, html: await response.text(), response }
}

/** The one-shot notice cookie a POST's redirect leaves for the next page. */
function flashOf(response: Response): string {
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
  expect(cookie).toMatch(/^hl_notice=/)
  return cookie
}

function csrfOf(html: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(html)
  if (match?.[1] === undefined) throw new Error('no CSRF field on the page')
  return match[1]
}

async function eventRow(id: string) {
  const [row] = await stack.database.db.select().from(inboundEvents).where(eq(inboundEvents.id, id))
  return row
}

describe('without ADMIN_TOKEN', () => {
  it('every page answers 404 in the error shape, never open; the bearer API still says 403', async () => {
    for (const path of [
      '/admin',
      '/admin/',
      '/admin/events',
      '/admin/login',
      '/admin/queues',
      '/admin/queues/',
    ]) {
      const response = await off.app.request(path)
      expect(response.status, path).toBe(404)
      expect(await response.json()).toEqual({
        error: { code: 'admin_disabled', message: 'the admin page is off: set ADMIN_TOKEN to enable it' },
      })
    }
    const login = await post(off.app, '/admin/login', { name: 'x', token: 'anything-at-all-here' })
    expect(login.status).toBe(404)
    const api = await off.app.request('/admin/api/operations')
    expect(api.status).toBe(403)
    expect(((await api.json()) as { error: { code: string } }).error.code).toBe('api_disabled')
  })
})

describe('login', () => {
  it('sends a person without a session to the login form, keeping where they were going', async () => {
    const response = await stack.app.request('/admin/events?status=failed')
    expect(response.status).toBe(303)
    expect(response.headers.get('location')).toBe(
      `/admin/login?${new URLSearchParams({ next: '/admin/events?status=failed' })}`,
    )
    const form = await stack.app.request('/admin/login')
    expect(form.status).toBe(200)
    expect(await form.text()).toContain('name="token"')
  })

  it('refuses a wrong token, an empty name and a cross-origin post, and sets no cookie', async () => {
    const wrong = await post(stack.app, '/admin/login', { name: 'ana', token: `${TOKEN}x` })
    expect(wrong.status).toBe(401)
    expect(wrong.headers.get('set-cookie')).toBeNull()
    expect(await wrong.text()).toContain('That is not the admin token.')
    const nameless = await post(stack.app, '/admin/login', { name: '  ', token: TOKEN })
    expect(nameless.status).toBe(400)
    expect(nameless.headers.get('set-cookie')).toBeNull()
    const cross = await post(
      stack.app,
      '/admin/login',
      { name: 'ana', token: TOKEN },
      { origin: 'https://evil.example' },
    )
    expect(cross.status).toBe(403)
    expect(cross.headers.get('set-cookie')).toBeNull()
    const noOrigin = await stack.app.request('/admin/login', {
      method: 'POST',
      body: new URLSearchParams({ name: 'ana', token: TOKEN }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(noOrigin.status).toBe(403)
    const crossSite = await post(
      stack.app,
      '/admin/login',
      { name: 'ana', token: TOKEN },
      { 'sec-fetch-site': 'cross-site' },
    )
    expect(crossSite.status).toBe(403)
  })

  it('sets an HttpOnly, SameSite=Strict cookie on /admin (Secure behind https), and no open redirect', async () => {
    const response = await post(stack.app, '/admin/login', {
      name: 'ana',
      token: TOKEN,
      next: '//evil.example/x',
    })
    expect(response.status).toBe(303)
    expect(response.headers.get('location')).toBe('/admin')
    for (const next of [
      '/admin\\@evil.example',
      '/admin/x\r\nSet-Cookie: a=b',
      'https://evil.example/admin',
    ]) {
      const odd = await post(stack.app, '/admin/login', { name: 'ana', token: TOKEN, next })
      expect(odd.headers.get('location'), next).toBe('/admin')
    }
    const cookie = response.headers.get('set-cookie') ?? ''
    expect(cookie).toMatch(/^hl_admin=/)
    expect(cookie).toContain('HttpOnly')
    expect(cookie).toContain('SameSite=Strict')
    expect(cookie).toContain('Path=/admin')
    expect(cookie).not.toContain('Secure')
    const https = await post(
      stack.app,
      '/admin/login',
      { name: 'ana', token: TOKEN },
      { 'x-forwarded-proto': 'https' },
    )
    expect(https.headers.get('set-cookie')).toContain('Secure')
  })

  it('rejects a tampered cookie; logout needs the CSRF token and ends the session', async () => {
    const cookie = await login()
    const tampered = `${cookie.slice(0, -3)}abc`
    expect((await stack.app.request('/admin/events', { headers: { cookie: tampered } })).status).toBe(303)
    const { html } = await page('/admin/events', cookie)
    expect((await post(stack.app, '/admin/logout', {}, { cookie })).status).toBe(403)
    const out = await post(stack.app, '/admin/logout', { _csrf: csrfOf(html) }, { cookie })
    expect(out.status).toBe(303)
    expect(out.headers.get('set-cookie')).toMatch(/hl_admin=;.*Max-Age=0/)
  })

  it('ends a session after 12 hours, whatever the cookie says', async () => {
    const cookie = await login()
    expect((await page('/admin/events', cookie)).status).toBe(200)
    vi.useFakeTimers({ toFake: ['Date'] })
    try {
      vi.setSystemTime(Date.now() + SESSION_TTL_MS + 1000)
      const expired = await stack.app.request('/admin/events', { headers: { cookie } })
      expect(expired.status).toBe(303)
      expect(expired.headers.get('location')).toMatch(/^\/admin\/login/)
    } finally {
      vi.useRealTimers()
    }
  })

  it('serves pages that cannot be framed, cached or made to run scripts', async () => {
    const { response } = await page('/admin/events', await login())
    expect(response.headers.get('content-security-policy')).toContain("default-src 'none'")
    expect(response.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
    expect(response.headers.get('x-frame-options')).toBe('DENY')
    expect(response.headers.get('cache-control')).toBe('no-store')
  })

  it('refuses an oversized login form before reading it', async () => {
    const response = await post(stack.app, '/admin/login', { name: 'x'.repeat(300_000), token: TOKEN })
    expect(response.status).toBe(413)
  })

  it('leaves the bearer API alone: its unknown paths are JSON 404s, not redirects', async () => {
    const response = await stack.app.request('/admin/api/nothing-here', {
      headers: { authorization: `Bearer ${TOKEN}` },
    })
    expect(response.status).toBe(404)
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('not_found')
  })
})

describe('events', () => {
  const base = Date.parse('2026-01-10T12:00:00.000Z')
  beforeAll(async () => {
    // 120 events a minute apart; every fifth FAILED, every third from another source.
    for (let i = 0; i < 120; i += 1) {
      await seedEvent(stack.database.db, {
        source: i % 3 === 0 ? 'other' : 'acme',
        eventId: `list-${i}`,
        eventType: i % 2 === 0 ? 'invoice.paid' : 'invoice.created',
        status: i % 5 === 0 ? 'failed' : 'done',
        lastError: i % 5 === 0 ? 'destination answered 500' : null,
        receivedAt: new Date(base + i * 60_000),
      })
    }
  })

  it('filters by source, status, type and time', async () => {
    const cookie = await login()
    const ids = async (query: string) => {
      const { status, html } = await page(`/admin/events?${query}`, cookie)
      expect(status, query).toBe(200)
      return [...html.matchAll(/>(list-\d+)</g)].map((m) => m[1])
    }
    const failed = await ids('status=failed&source=&type=&from=&to=')
    expect(failed.length).toBe(24)
    const failedAcme = await ids('status=failed&source=acme')
    expect(failedAcme).toEqual(
      [
        'list-115',
        'list-110',
        'list-100',
        'list-95',
        'list-85',
        'list-80',
        'list-70',
        'list-65',
        'list-55',
      ].concat(['list-50', 'list-40', 'list-35', 'list-25', 'list-20', 'list-10', 'list-5']),
    )
    const typed = await ids('source=acme&type=invoice.paid&status=failed')
    expect(typed).toEqual([
      'list-110',
      'list-100',
      'list-80',
      'list-70',
      'list-50',
      'list-40',
      'list-20',
      'list-10',
    ])
    // datetime-local values are UTC; 'to' is exclusive.
    const window = await ids('from=2026-01-10T12:10&to=2026-01-10T12:13')
    expect(window).toEqual(['list-12', 'list-11', 'list-10'])
  })

  it('answers a bad filter with a 400 page that says what is wrong', async () => {
    const cookie = await login()
    const status = await page('/admin/events?status=weird', cookie)
    expect(status.status).toBe(400)
    expect(status.html).toContain('Bad filter: status')
    const time = await page('/admin/events?from=yesterday', cookie)
    expect(time.status).toBe(400)
    expect(time.html).toContain('is not a time')
    const order = await page('/admin/events?from=2026-01-11T00:00&to=2026-01-10T00:00', cookie)
    expect(order.status).toBe(400)
    expect(order.html).toContain('before')
    const cursor = await page('/admin/events?after=garbage', cookie)
    expect(cursor.status).toBe(400)
  })

  it('pages with a keyset cursor: every row once, newest first, and rows arriving meanwhile do not shift it', async () => {
    const cookie = await login()
    const seen: string[] = []
    let path: string | undefined = '/admin/events?source=acme'
    let pages = 0
    while (path !== undefined) {
      const { html } = await page(path, cookie)
      seen.push(...[...html.matchAll(/>(list-\d+)</g)].map((m) => m[1] ?? ''))
      const next = /href="([^"]+)">Next page/.exec(html)?.[1]
      path = next?.replaceAll('&amp;', '&')
      pages += 1
      // A new event arriving between pages lands before the first page, not in the middle.
      if (pages === 1) {
        await seedEvent(stack.database.db, {
          source: 'acme',
          eventId: 'late-arrival',
          receivedAt: new Date(base + 10e9),
        })
      }
    }
    const expected = Array.from({ length: 120 }, (_, i) => i)
      .filter((i) => i % 3 !== 0)
      .reverse()
      .map((i) => `list-${i}`)
    expect(pages).toBe(2)
    expect(seen).toEqual(expected)
  })

  it('shows one event: headers, pretty body, attempts, and only its own operations', async () => {
    const cookie = await login()
    const id = await seedEvent(stack.database.db, {
      eventId: 'evt:1',
      eventType: 'order.placed',
      status: 'failed',
      body: '{"order":{"id":7,"items":[1,2]}}',
    })
    await stack.database.sql`
      insert into event_attempts (event_row_id, attempt, outcome, error, started_at)
      values (${id}, 1, 'error', 'destination answered 502', now())`
    for (const key of ['acme:evt%3A1:charge', 'acme:evt%3A10:charge', 'acme:evt%3A1x:charge']) {
      await stack.database.db.insert(operations).values({
        operationKey: key,
        tool: 'charge',
        effectClass: 'irreversible',
        payloadHash: 'a'.repeat(64),
        args: {},
        status: 'completed',
      })
    }
    const { status, html } = await page(`/admin/events/${id}`, cookie)
    expect(status).toBe(200)
    expect(html).toContain('webhook-id')
    expect(html).toContain('{\n  &quot;order&quot;: {\n    &quot;id&quot;: 7,')
    expect(html).toContain('destination answered 502')
    expect(html).toContain('acme:evt%3A1:charge')
    expect(html).not.toContain('acme:evt%3A10:charge')
    expect(html).not.toContain('acme:evt%3A1x:charge')
    expect(html).toContain('>Replay</button>')
    expect((await page('/admin/events/00000000-0000-4000-8000-000000000000', cookie)).status).toBe(404)
    expect((await page('/admin/events/not-a-uuid', cookie)).status).toBe(404)
  })
})

describe('replay', () => {
  it('needs the CSRF token and the same origin; without them nothing changes', async () => {
    const cookie = await login()
    const id = await seedEvent(stack.database.db, { eventId: 'csrf-1', status: 'failed', attempts: 3 })
    const { html } = await page(`/admin/events/${id}`, cookie)
    const token = csrfOf(html)
    const path = `/admin/events/${id}/replay`
    expect((await post(stack.app, path, {}, { cookie })).status).toBe(403)
    expect((await post(stack.app, path, { _csrf: `${token}x` }, { cookie })).status).toBe(403)
    expect(
      (await post(stack.app, path, { _csrf: token }, { cookie, origin: 'https://evil.example' })).status,
    ).toBe(403)
    // Another session's token is not this session's.
    const other = csrfOf((await page(`/admin/events/${id}`, await login('bo'))).html)
    expect((await post(stack.app, path, { _csrf: other }, { cookie })).status).toBe(403)
    // No session at all: sent to log in, nothing done.
    expect((await post(stack.app, path, { _csrf: token })).status).toBe(401)
    expect(await eventRow(id)).toMatchObject({ status: 'failed', attempts: 3, replays: 0 })
    expect(
      await stack.database.db.select().from(eventReplays).where(eq(eventReplays.eventRowId, id)),
    ).toEqual([])
  })

  it('flips a FAILED event to PENDING with fresh attempts, audits who, and re-adds its finished job', async () => {
    const cookie = await login('ana')
    const id = await seedEvent(stack.database.db, {
      eventId: 'replay-1',
      status: 'failed',
      attempts: 3,
      lastError: 'boom',
    })
    // The job of the first round finished and is kept: BullMQ would ignore a plain re-add.
    const jobId = processEventJobId(id)
    await stack.queue.add(PROCESS_EVENT, { eventRowIds: [id] }, { jobId })
    const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: null })
    const worker = new Worker(stack.queue.name, async () => {}, {
      connection,
      prefix: stack.queue.opts.prefix,
    })
    try {
      for (let i = 0; i < 100 && (await stack.queue.getJobState(jobId)) !== 'completed'; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    } finally {
      await worker.close()
      connection.disconnect()
    }
    expect(await stack.queue.getJobState(jobId)).toBe('completed')

    const csrf = csrfOf((await page(`/admin/events/${id}`, cookie)).html)
    const response = await post(stack.app, `/admin/events/${id}/replay`, { _csrf: csrf }, { cookie })
    expect(response.status).toBe(303)
    expect(response.headers.get('location')).toBe(`/admin/events/${id}`)
    const notice = flashOf(response)
    expect(await eventRow(id)).toMatchObject({ status: 'pending', attempts: 0, replays: 1, lastError: null })
    expect(
      await stack.database.db.select().from(eventReplays).where(eq(eventReplays.eventRowId, id)),
    ).toEqual([expect.objectContaining({ replay: 1, by: 'ana', previousAttempts: 3, previousError: 'boom' })])
    expect(await stack.queue.getJobState((await eventRow(id))?.jobId ?? jobId)).toBe('waiting')
    const after = await page(`/admin/events/${id}`, `${cookie}; ${notice}`)
    expect(after.html).toContain('Replayed: the event is PENDING again')
    expect(after.html).not.toContain('>Replay</button>')

    // Not FAILED any more: a clear message, and nothing changes.
    const again = await post(stack.app, `/admin/events/${id}/replay`, { _csrf: csrf }, { cookie })
    expect(again.status).toBe(409)
    expect(await again.text()).toContain(
      'This event is PENDING: only FAILED events can be replayed. Nothing changed.',
    )
    expect(await eventRow(id)).toMatchObject({ status: 'pending', replays: 1 })
  })

  it('bulk: replays the FAILED events of the filter and no others', async () => {
    const cookie = await login('cy')
    const matching = await Promise.all(
      [1, 2, 3].map((n) =>
        seedEvent(stack.database.db, {
          source: 'bulk',
          eventId: `bulk-${n}`,
          eventType: 'x',
          status: 'failed',
        }),
      ),
    )
    const otherType = await seedEvent(stack.database.db, {
      source: 'bulk',
      eventId: 'bulk-4',
      eventType: 'y',
      status: 'failed',
    })
    const done = await seedEvent(stack.database.db, {
      source: 'bulk',
      eventId: 'bulk-5',
      eventType: 'x',
      status: 'done',
    })
    const csrf = csrfOf((await page('/admin/events', cookie)).html)
    const response = await post(
      stack.app,
      '/admin/events/replay',
      { _csrf: csrf, source: 'bulk', type: 'x', status: 'failed' },
      { cookie },
    )
    expect(response.status).toBe(303)
    expect(response.headers.get('location')).toBe('/admin/events?source=bulk&type=x')
    for (const id of matching) expect(await eventRow(id)).toMatchObject({ status: 'pending', replays: 1 })
    expect(await eventRow(otherType)).toMatchObject({ status: 'failed', replays: 0 })
    expect(await eventRow(done)).toMatchObject({ status: 'done', replays: 0 })
    // Re-added in jobs shared by up to 64 rows (the relay's way), each row recording its job.
    for (const id of matching) {
      const jobId = (await eventRow(id))?.jobId ?? processEventJobId(id)
      expect(await stack.queue.getJobState(jobId)).toBe('waiting')
    }
    const { html } = await page('/admin/events?source=bulk&type=x', `${cookie}; ${flashOf(response)}`)
    expect(html).toContain('Replayed 3 FAILED events')
    // 'bulk' is not a configured source, yet the filter keeps it selected.
    expect(html).toContain('<option value="bulk" selected="">bulk</option>')
    expect(html).toContain('until none is left')
  })

  it('bulk: one action replays the whole filter, past the 1,000 rows of a chunk', async () => {
    const cookie = await login('cy')
    await seedFailedEvents(stack.database.sql, 'wide', 2500)
    // Three of them owe route crm a delivery: the page's route filter replays those alone.
    await stack.database.sql`
      insert into event_routes (event_row_id, route_id, status)
      select id, 'crm', 'failed' from inbound_events where source = 'wide' order by received_at limit 3`
    const csrf = csrfOf((await page('/admin/events', cookie)).html)
    const byRoute = await post(
      stack.app,
      '/admin/events/replay',
      { _csrf: csrf, source: 'wide', route: 'crm', status: 'failed' },
      { cookie },
    )
    expect(byRoute.headers.get('location')).toBe('/admin/events?source=wide&route=crm')
    const { html: routed } = await page(
      '/admin/events?source=wide&route=crm',
      `${cookie}; ${flashOf(byRoute)}`,
    )
    expect(routed).toContain('Replayed 3 FAILED events')
    const response = await post(
      stack.app,
      '/admin/events/replay',
      { _csrf: csrf, source: 'wide', status: 'failed' },
      { cookie },
    )
    expect(response.status).toBe(303)
    const rows = await stack.database.sql`
      select status::text, count(*)::int as n, count(*) filter (where enqueued_at is not null)::int as queued
      from inbound_events where source = 'wide' group by 1`
    expect(rows).toEqual([{ status: 'pending', n: 2500, queued: 2500 }])
    const { html } = await page('/admin/events?source=wide', `${cookie}; ${flashOf(response)}`)
    expect(html).toContain('Replayed 2497 FAILED events')
  })
})

describe('operations and approvals', () => {
  it('lists operations needing reconciliation by default, and another status on request', async () => {
    const cookie = await login()
    await stack.database.db.insert(operations).values([
      {
        operationKey: 'ops:1:ship',
        tool: 'ship',
        effectClass: 'irreversible',
        payloadHash: 'b'.repeat(64),
        args: {},
        status: 'needs_reconciliation',
      },
      {
        operationKey: 'ops:2:ship',
        tool: 'ship',
        effectClass: 'irreversible',
        payloadHash: 'b'.repeat(64),
        args: {},
        status: 'exhausted',
      },
    ])
    const first = await page('/admin/operations', cookie)
    expect(first.html).toContain('ops:1:ship')
    expect(first.html).not.toContain('ops:2:ship')
    const exhausted = await page('/admin/operations?status=exhausted', cookie)
    expect(exhausted.html).toContain('ops:2:ship')
    expect(exhausted.html).not.toContain('ops:1:ship')
    expect((await page('/admin/operations?status=nope', cookie)).status).toBe(400)
    // The bearer API takes the page's 'all' too, so a link copied from one works on the other.
    const api = async (query: string) => {
      const response = await stack.app.request(`/admin/api/operations${query}`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      })
      return {
        status: response.status,
        body: (await response.json()) as { operations?: { key: string }[] },
      }
    }
    const all = await api('?status=all')
    expect(all.status).toBe(200)
    expect(all.body.operations?.map((op) => op.key)).toEqual(
      expect.arrayContaining(['ops:1:ship', 'ops:2:ship']),
    )
    const exhaustedOnly = await api('?status=exhausted')
    expect(exhaustedOnly.body.operations?.map((op) => op.key)).toContain('ops:2:ship')
    expect(exhaustedOnly.body.operations?.map((op) => op.key)).not.toContain('ops:1:ship')
    expect((await api('?status=nope')).status).toBe(400)
  })

  it('shows the evidence and decides through the ledger; bad or stale decisions change nothing', async () => {
    const cookie = await login('dee')
    const seeded = await seedPendingApproval(stack.database.db, 'order:9:charge', { amount: 42 })
    const { html } = await page('/admin/approvals', cookie)
    expect(html).toContain('order:9:charge')
    expect(html).toContain('&quot;matches&quot;: 0')
    expect(html).toContain(seeded.payloadHash)
    const csrf = csrfOf(html)
    const path = `/admin/approvals/${seeded.approvalId}/decision`
    const state = async () => {
      const [op] = await stack.database.db
        .select()
        .from(operations)
        .where(eq(operations.id, seeded.operationId))
      const [approval] = await stack.database.db
        .select()
        .from(approvals)
        .where(eq(approvals.id, seeded.approvalId))
      return { op: op?.status, approval: approval?.status, by: approval?.decidedBy }
    }
    const untouched = { op: 'awaiting_approval', approval: 'pending', by: null }

    expect((await post(stack.app, path, { decision: 'abandon' }, { cookie })).status).toBe(403)
    expect(await state()).toEqual(untouched)
    const badJson = await post(
      stack.app,
      path,
      { _csrf: csrf, decision: 'record_success', evidence: '{nope' },
      { cookie },
    )
    expect(badJson.status).toBe(400)
    expect(await badJson.text()).toContain('The evidence must be JSON')
    const noEvidence = await post(
      stack.app,
      path,
      { _csrf: csrf, decision: 'record_success', evidence: '' },
      { cookie },
    )
    expect(noEvidence.status).toBe(400)
    const mismatch = await post(
      stack.app,
      path,
      { _csrf: csrf, decision: 'retry', payloadHash: 'c'.repeat(64) },
      { cookie },
    )
    expect(mismatch.status).toBe(409)
    expect(await mismatch.text()).toContain(seeded.payloadHash)
    expect(await state()).toEqual(untouched)

    const ok = await post(
      stack.app,
      path,
      {
        _csrf: csrf,
        decision: 'record_success',
        evidence: '{"seen":"dashboard"}',
        result: '{"id":"ch_1"}',
        downstreamId: 'ch_1',
      },
      { cookie },
    )
    expect(ok.status).toBe(303)
    expect(ok.headers.get('location')).toBe('/admin/approvals')
    expect((await page('/admin/approvals', `${cookie}; ${flashOf(ok)}`)).html).toContain('Decision recorded.')
    expect(await state()).toEqual({ op: 'completed', approval: 'decided', by: 'dee' })
    const [op] = await stack.database.db
      .select()
      .from(operations)
      .where(eq(operations.id, seeded.operationId))
    expect(op).toMatchObject({
      downstreamId: 'ch_1',
      resultJson: { id: 'ch_1' },
      evidence: { seen: 'dashboard' },
    })

    const twice = await post(stack.app, path, { _csrf: csrf, decision: 'abandon' }, { cookie })
    expect(twice.status).toBe(409)
    expect(await twice.text()).toContain('Already decided (record_success by dee)')
  })
})

describe('queue dashboard', () => {
  it('serves the board and its assets under the session only', async () => {
    expect((await stack.app.request('/admin/queues')).status).toBe(303)
    const cookie = await login()
    const board = await page('/admin/queues', cookie)
    expect(board.status).toBe(200)
    expect(board.html).toContain('<base href="/admin/queues/"')
    const asset = /src="(static\/[^"]+\.js)"/.exec(board.html)?.[1]
    expect(asset).toBeDefined()
    const script = await stack.app.request(`/admin/queues/${asset}`, { headers: { cookie } })
    expect(script.status).toBe(200)
    expect(script.headers.get('content-type')).toContain('javascript')
    expect((await stack.app.request(`/admin/queues/${asset}`)).status).toBe(303)
    const api = await stack.app.request('/admin/queues/api/queues', { headers: { cookie } })
    expect(api.status).toBe(200)
    expect((await stack.app.request('/admin/queues/api/queues')).status).toBe(401)
    // The board's own writes (pause, retry, clean) need the session and the same origin too.
    const pause = `/admin/queues/api/queues/${encodeURIComponent(stack.queue.name)}/pause`
    const crossSite = await stack.app.request(pause, {
      method: 'PUT',
      headers: { cookie, origin: 'https://evil.example', 'content-type': 'application/json' },
    })
    expect(crossSite.status).toBe(403)
    expect(await stack.queue.isPaused()).toBe(false)
  })

  it('without queues (in-process mode) says the dashboard needs Redis', async () => {
    const noRedis = await createApiStack(testConfig(), { adminToken: TOKEN })
    try {
      const login = await post(noRedis.app, '/admin/login', { name: 'ana', token: TOKEN })
      const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
      const response = await noRedis.app.request('/admin/queues', { headers: { cookie } })
      expect(response.status).toBe(404)
      expect(await response.text()).toContain('The queue dashboard needs Redis')
      expect((await noRedis.app.request('/admin/queues')).status).toBe(303)
    } finally {
      await noRedis.close()
    }
  })
})
