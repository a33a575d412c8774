import type postgres from 'postgres'
import { afterAll, afterEach, beforeAll, expect } from 'vitest'
import { createTestDatabase, type TestDatabase } from './database.js'
import { startTestService, type TestService } from './service.js'
import { signedHeaders } from './signing.js'

/** Posts a signed event to a running service and returns its ledger row id; the answer must be 200. */
export async function deliverEvent(
  url: string,
  source: string,
  id: string,
  payload: Record<string, unknown> = { type: 'order.created', id },
): Promise<string> {
  const body = JSON.stringify(payload)
  const response = await fetch(`${url}/webhooks/${source}`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
  return ((await response.json()) as { id: string }).id
}

/**
 * Posts a signed `order.paid` delivery of `eventId` and returns what came back, whatever it is: the
 * status and the ledger's answer (`accepted`, `duplicate`), for tests that count answers under load.
 */
export async function deliverSigned(
  url: string,
  source: string,
  eventId: string,
): Promise<{ status: number; answer: string | undefined }> {
  const body = JSON.stringify({ type: 'order.paid', eventId })
  const response = await fetch(`${url}/webhooks/${source}`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id: eventId }),
  })
  const answer = (await response.json()) as { status?: string }
  return { status: response.status, answer: answer.status }
}

/** The statuses of the rows of an event id (one row, or none, in a ledger that dedups). */
export async function eventStatuses(sql: postgres.Sql, eventId: string): Promise<string[]> {
  const rows = await sql<Array<{ status: string }>>`
    select status::text from inbound_events where event_id = ${eventId}`
  return rows.map((row) => row.status)
}

/** Which of these event ids have no DONE row yet (a poll's subject after a fault). */
export async function notDoneYet(sql: postgres.Sql, eventIds: readonly string[]): Promise<string[]> {
  const rows = await sql<Array<{ event_id: string }>>`
    select event_id from inbound_events where event_id = any(${eventIds as string[]}) and status = 'done'`
  const done = new Set(rows.map((row) => row.event_id))
  return eventIds.filter((eventId) => !done.has(eventId))
}

/** How many forwards of `eventId` (an `order.paid` body as deliverSigned sends) a sink received. */
export function forwardsOf(sink: { received: ReadonlyArray<{ body: string }> }, eventId: string): number {
  return sink.received.filter((r) => (JSON.parse(r.body) as { eventId: string }).eventId === eventId).length
}

/** How many of a source's events are in each status, e.g. `{ done: 3, pending: 1 }`. */
export async function statusCounts(sql: postgres.Sql, source: string): Promise<Record<string, number>> {
  const rows = await sql<Array<{ status: string; n: number }>>`
    select status::text, count(*)::int as n from inbound_events where source = ${source} group by 1 order by 1`
  return Object.fromEntries(rows.map((row) => [row.status, row.n]))
}

/** Logs in to a running service's admin page and returns the session cookie. */
export async function adminCookie(url: string, token: string): Promise<string> {
  const login = await fetch(`${url}/admin/login`, {
    method: 'POST',
    redirect: 'manual',
    body: new URLSearchParams({ name: 'ana', token }),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url },
  })
  expect(login.status).toBe(303)
  return (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
}

/**
 * Presses a disabled route's Enable button on /admin/routes as a logged-in person: the form's POST
 * with the page's CSRF token. Returns its answer and the page it redirected to (its notice).
 */
export async function enableOnAdminPage(
  url: string,
  cookie: string,
  source: string,
  routeId: string,
): Promise<{ status: number; page: string }> {
  const html = await (await fetch(`${url}/admin/routes`, { headers: { cookie } })).text()
  const csrf = /name="_csrf" value="([^"]+)"/.exec(html)?.[1] ?? ''
  const enable = await fetch(`${url}/admin/routes/${source}/${routeId}/enable`, {
    method: 'POST',
    redirect: 'manual',
    body: new URLSearchParams({ _csrf: csrf }),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url, cookie },
  })
  const location = enable.headers.get('location')
  const page =
    location === null ? '' : await (await fetch(`${url}${location}`, { headers: { cookie } })).text()
  return { status: enable.status, page }
}

/** The line of `name` (with its labels) on a running service's /metrics, e.g. `name{…} 1`. */
export async function metricLine(url: string, name: string): Promise<string | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text()
  return text.split('\n').find((line) => line.startsWith(name))
}

/** The most arrivals within any window of `ms` that starts at an arrival (a rate limit's check). */
export function busiestWindow(times: readonly number[], ms: number): number {
  const sorted = [...times].sort((a, b) => a - b)
  let best = 0
  let start = 0
  for (let end = 0; end < sorted.length; end += 1) {
    while ((sorted[end] ?? 0) - (sorted[start] ?? 0) >= ms) start += 1
    best = Math.max(best, end - start + 1)
  }
  return best
}

export interface DeliveryTest {
  /** This file's database, made before its tests and dropped after them. */
  readonly database: TestDatabase
  /** Starts the whole service on this file's database; it is closed after the test. */
  start(options?: Omit<Parameters<typeof startTestService>[0] & object, 'database'>): Promise<TestService>
  /** Runs `close` after the test (a sink, a proxy). */
  closeAfter(...close: Array<() => Promise<void>>): void
}

/** One database per file and a service per test, everything closed in order: the delivery tests' hooks. */
export function useDeliveryTest(prepare?: (database: TestDatabase) => Promise<void>): DeliveryTest {
  let database: TestDatabase | undefined
  let running: TestService | undefined
  const closers: Array<() => Promise<void>> = []
  beforeAll(async () => {
    database = await createTestDatabase()
    await prepare?.(database)
  })
  afterEach(async () => {
    await running?.close()
    running = undefined
    for (const close of closers.splice(0)) await close()
  })
  afterAll(async () => {
    await database?.drop()
  })
  return {
    get database() {
      if (database === undefined) throw new Error('the test database is made in beforeAll')
      return database
    },
    async start(options = {}) {
      running = await startTestService({ ...options, database: this.database })
      return running
    },
    closeAfter(...close) {
      closers.push(...close)
    },
  }
}
