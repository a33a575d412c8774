// What a person sees: standards mode, one-shot notices, the operation page, the overview.
import { eq, sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { operationAudit, operations } from '../../src/db/outbound-schema.js'
import { inboundEvents } from '../../src/db/schema.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'
import { seedEvent, seedPendingApproval } from './seed.js'

const TOKEN = 'admin-token-for-the-page-tests'
const ORIGIN = 'http://localhost'
let stack: ApiStack
let cookie: string

beforeAll(async () => {
  stack = await createApiStack(testConfig(), { adminToken: TOKEN, dashboard: true })
  const login = await post('/admin/login', { name: 'ana', token: TOKEN })
  cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
})
afterAll(async () => {
  await stack.close()
})

function post(path: string, fields: Record<string, string>, headers: Record<string, string> = {}) {
  return stack.app.request(path, {
    method: 'POST',
    body: new URLSearchParams(fields),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: ORIGIN, ...headers },
  })
}

async function page(path: string, extraCookie = '') {
  const response = await stack.app.request(path, {
    headers: { cookie: extraCookie === '' ? cookie : `${cookie}; ${extraCookie}` },
  })
  return { status: response.status, html: await response.text(), response }
}

const csrfOf = (html: string) => /name="_csrf" value="([^"]+)"/.exec(html)?.[1] ?? ''

/** The table row of a page that names `text` first (a source, an event id), up to its `</tr>`. */
const rowOf = (html: string, text: string) => {
  const start = html.indexOf(text)
  return html.slice(start, html.indexOf('</tr>', start))
}

describe('every page', () => {
  it('starts with the doctype, so browsers render in standards mode', async () => {
    for (const path of ['/admin', '/admin/events', '/admin/operations', '/admin/approvals']) {
      const { html } = await page(path)
      expect(html.startsWith('<!DOCTYPE html><html'), path).toBe(true)
    }
    const login = await stack.app.request('/admin/login')
    expect((await login.text()).startsWith('<!DOCTYPE html><html')).toBe(true)
  })

  it('gives the queue board a link back to the admin page', async () => {
    const { html } = await page('/admin/queues')
    expect(html).toContain('« Admin page')
  })
})

describe('notices after a POST', () => {
  it('are shown once: a reload of the page does not show a stale "Replayed" again', async () => {
    const id = await seedEvent(stack.database.db, { eventId: 'flash-1', status: 'failed' })
    const csrf = csrfOf((await page(`/admin/events/${id}`)).html)
    const replay = await post(`/admin/events/${id}/replay`, { _csrf: csrf }, { cookie })
    expect(replay.status).toBe(303)
    // The address carries no notice: a reload or a shared link shows the page as it is.
    expect(replay.headers.get('location')).toBe(`/admin/events/${id}`)
    const flash = (replay.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
    expect(flash).toMatch(/^hl_notice=/)
    const first = await page(`/admin/events/${id}`, flash)
    expect(first.html).toContain('Replayed: the event is PENDING again')
    expect(first.response.headers.get('set-cookie')).toMatch(/hl_notice=;.*Max-Age=0/)
    const reload = await page(`/admin/events/${id}`)
    expect(reload.html).not.toContain('Replayed')
    // A crafted cookie can only pick one of the page's own notices.
    const crafted = await page(`/admin/events/${id}`, 'hl_notice=<b>hi</b>')
    expect(crafted.html).not.toContain('hi</b>')
    expect(crafted.html).not.toContain('class="notice')
  })
})

describe('operations', () => {
  it('lists every status under "all", links each row to its page, and mutes a settled error', async () => {
    const seeded = await seedPendingApproval(stack.database.db, 'shop:ord%3A7:charge', { amount: 7 })
    const [done] = await stack.database.db
      .insert(operations)
      .values({
        operationKey: 'shop:ord%3A8:charge',
        tool: 'charge',
        effectClass: 'irreversible',
        payloadHash: 'd'.repeat(64),
        args: { amount: 8 },
        status: 'completed',
        lastError: 'socket hang up',
      })
      .returning({ id: operations.id })
    const all = await page('/admin/operations?status=all')
    expect(all.status).toBe(200)
    expect(all.html).toContain('<option value="all" selected="">all</option>')
    expect(all.html).toContain(`href="/admin/operations/${seeded.operationId}"`)
    expect(all.html).toContain(`href="/admin/operations/${done?.id}"`)
    // Completed (a person recorded success): the old error is history, not an alarm.
    expect(all.html).toContain('<td class="earlier">earlier: socket hang up</td>')
    expect(all.html).toContain('<td class="err">socket hang up</td>')
  })

  it('shows one operation: arguments, attempts, approvals and the audit trail', async () => {
    const seeded = await seedPendingApproval(stack.database.db, 'shop:ord%3A9:charge', { amount: 9 })
    await stack.database.db.insert(operationAudit).values({
      operationId: seeded.operationId,
      operationKey: 'shop:ord%3A9:charge',
      event: 'escalated',
      fromStatus: 'needs_reconciliation',
      toStatus: 'awaiting_approval',
      actor: 'reconciler',
      details: { matches: 0 },
    })
    await stack.database.sql`
      insert into operation_attempts (operation_id, attempt, attempt_key, status, error, finished_at, started_at)
      values (${seeded.operationId}, 1, 'shop:ord%3A9:charge', 'unknown', 'socket hang up',
              now(), now() - interval '1500 milliseconds')`
    const { status, html } = await page(`/admin/operations/${seeded.operationId}`)
    expect(status).toBe(200)
    expect(html).toContain('shop:ord%3A9:charge')
    expect(html).toContain('&quot;amount&quot;: 9')
    expect(html).toContain('1.50 s')
    expect(html).toContain('reconciliation found no charge for this key')
    expect(html).toContain('needs_reconciliation → awaiting_approval')
    expect(html).toContain('Decide on the Approvals page')
    expect((await page('/admin/operations/00000000-0000-4000-8000-000000000000')).status).toBe(404)
    expect((await page('/admin/operations/not-a-uuid')).status).toBe(404)
  })
})

describe('the event page', () => {
  it('shows each attempt with its duration and the destination response excerpt', async () => {
    const id = await seedEvent(stack.database.db, { eventId: 'dur-1', status: 'failed' })
    await stack.database.sql`
      insert into event_attempts (event_row_id, attempt, outcome, error, response_status, response_excerpt, started_at, finished_at)
      values (${id}, 1, 'error', 'destination answered 503', 503, '{"error":"maintenance <soon>"}',
              now() - interval '250 milliseconds', now())`
    const { html } = await page(`/admin/events/${id}`)
    expect(html).toContain('250 ms')
    expect(html).toContain('<span class="badge b-bad">503</span>')
    expect(html).toContain(
      '<pre class="excerpt">{&quot;error&quot;:&quot;maintenance &lt;soon&gt;&quot;}</pre>',
    )
  })
})

describe('the overview', () => {
  it('draws the last hour per source as SVG, with FAILED, awaiting approval and latency', async () => {
    const now = Date.now()
    const seed = async (source: string, n: number, status: 'done' | 'failed', latencyMs: number) => {
      for (let i = 0; i < n; i += 1) {
        const id = await seedEvent(stack.database.db, {
          source,
          eventId: `ov-${source}-${status}-${i}`,
          status,
          receivedAt: new Date(now - (i + 1) * 60_000),
        })
        await stack.database.db
          .update(inboundEvents)
          .set({ processedAt: new Date(now - (i + 1) * 60_000 + latencyMs) })
          .where(eq(inboundEvents.id, id))
      }
    }
    await seed('north', 4, 'done', 100)
    await seed('north', 1, 'failed', 100)
    await seed('south', 3, 'done', 2000)
    // An old delivery is outside the hour, inside the day.
    await seedEvent(stack.database.db, {
      source: 'south',
      eventId: 'ov-old',
      receivedAt: new Date(now - 5 * 3600_000),
    })
    await seedPendingApproval(stack.database.db, 'north:ov%3A1:charge')

    const { status, html } = await page('/admin?source=')
    expect(status).toBe(200)
    expect(html).not.toContain('<script')
    expect(html).toContain('<svg class="chart"')
    // 60 one-minute buckets in the main chart, each with a tooltip.
    const main = html.slice(html.indexOf('<svg class="chart"'), html.indexOf('</svg>'))
    expect(main.match(/<title>/g)?.length).toBe(60)
    expect(main).toContain('2 done, 0 in flight, 1 failed (per minute)')
    const row = (source: string) => rowOf(html, `>${source}</a></td>`)
    expect(row('north')).toMatch(
      /<td>5<\/td><td><a href="[^"]+status=failed" class="badge b-bad">1<\/a><\/td><td>0<\/td><td>1<\/td><td>100 ms<\/td><td>100 ms<\/td>/,
    )
    expect(row('south')).toMatch(
      /<td>3<\/td><td>0<\/td><td>0<\/td><td>0<\/td><td>2.00 s<\/td><td>2.00 s<\/td>/,
    )

    const day = await page('/admin?window=day')
    expect(day.html).toMatch(/Received<\/span><b>[0-9]+<\/b>/)
    const dayMain = day.html.slice(day.html.indexOf('<svg class="chart"'), day.html.indexOf('</svg>'))
    expect(dayMain.match(/<title>/g)?.length).toBe(96)
    expect(row('south')).not.toBe('')

    const refreshing = await page('/admin?refresh=30')
    expect(refreshing.html).toContain('<meta http-equiv="refresh" content="30"/>')
    expect((await page('/admin')).html).not.toContain('http-equiv="refresh"')
    expect((await page('/admin?refresh=1')).status).toBe(400)
    expect((await page('/admin?window=week')).status).toBe(400)
  })
})

/** A forward operation whose idempotent retries ran out: what a paused route's event has. */
const exhaustedForward = (operationKey: string) =>
  stack.database.db.insert(operations).values({
    operationKey,
    tool: 'forward',
    effectClass: 'idempotent',
    payloadHash: 'c'.repeat(64),
    args: {},
    status: 'exhausted',
  })

describe('events paused behind a disabled route', () => {
  it('are counted apart from those in flight, and the event list says paused, not pending', async () => {
    const paused = await seedEvent(stack.database.db, {
      source: 'gone',
      eventId: 'paused-1',
      status: 'pending',
      attempts: 0,
    })
    await seedEvent(stack.database.db, { source: 'gone', eventId: 'fresh-1', status: 'pending', attempts: 0 })
    await stack.database.db.execute(sql`
      insert into event_routes (event_row_id, route_id, status, last_error)
      values (${paused}, 'crm', 'paused', 'route crm is disabled: 410 Gone')`)

    const overview = await page('/admin?source=gone')
    expect(overview.html).toMatch(/In flight now<\/span><b>1<\/b>/)
    expect(overview.html).toMatch(/Paused \(route disabled\)<\/span><b>1<\/b>/)

    const list = await page('/admin/events?source=gone')
    const row = (eventId: string) => rowOf(list.html, eventId)
    expect(row('paused-1')).toContain('<span class="badge b-warn">paused</span>')
    expect(row('fresh-1')).toContain('<span class="badge b-info">pending</span>')

    // Its page: paused, and the route's exhausted operation says why it waits.
    await exhaustedForward('gone:paused-1:route:crm')
    const detail = await page(`/admin/events/${paused}`)
    expect(detail.html).toMatch(/<\/h1><span class="badge b-warn">paused<\/span>/)
    expect(detail.html).toContain('route paused: re-enable it under Routes to send again')
  })

  it("a source's own forward, which keeps no route rows, pauses every PENDING event of its source while disabled", async () => {
    const waiting = await seedEvent(stack.database.db, {
      source: 'gone-fwd',
      eventId: 'fwd-paused-1',
      status: 'pending',
      attempts: 1,
    })
    await seedEvent(stack.database.db, {
      source: 'gone-fwd',
      eventId: 'fwd-done-1',
      status: 'done',
      attempts: 1,
    })
    await stack.database.db.execute(sql`
      insert into disabled_routes (source, route_id, reason) values ('gone-fwd', 'forward', 'answered 410 Gone')`)

    const overview = await page('/admin?source=gone-fwd')
    expect(overview.html).toMatch(/In flight now<\/span><b>0<\/b>/)
    expect(overview.html).toMatch(/Paused \(route disabled\)<\/span><b>1<\/b>/)
    const list = await page('/admin/events?source=gone-fwd')
    const row = (eventId: string) => rowOf(list.html, eventId)
    expect(row('fwd-paused-1')).toContain('<span class="badge b-warn">paused</span>')
    expect(row('fwd-done-1')).not.toContain('paused')
    const detail = await page(`/admin/events/${waiting}`)
    expect(detail.html).toMatch(/<\/h1><span class="badge b-warn">paused<\/span>/)
    expect(detail.html).toContain('Forward paused: <span class="mono">gone-fwd/forward</span> is disabled')

    // Re-enabled: pending again, as any event waiting for its worker.
    await stack.database.db.execute(sql`delete from disabled_routes where source = 'gone-fwd'`)
    expect((await page('/admin?source=gone-fwd')).html).toMatch(/In flight now<\/span><b>1<\/b>/)
    expect((await page(`/admin/events/${waiting}`)).html).toMatch(
      /<\/h1><span class="badge b-info">pending<\/span>/,
    )
  })
})
