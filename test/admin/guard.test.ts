import { Hono } from 'hono'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type AdminEnv,
  requireCsrfToken,
  requireSession,
  sameOriginWrites,
} from '../../src/http/admin-ui/guard.js'
import { type AdminSessions, adminSessions, CSRF_FIELD } from '../../src/http/admin-ui/session.js'
import { handleError } from '../../src/http/errors.js'
import { createLogger } from '../../src/logger.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

// Sessions are rows in the ledger (so a logout revokes them), hence a database of this file's own.
let database: TestDatabase
let sessions: AdminSessions
beforeAll(async () => {
  database = await createTestDatabase()
  sessions = adminSessions('admin-token-0123456789', database.db)
})
afterAll(async () => {
  await database.drop()
})
const ORIGIN = 'http://admin.test'

/** A login route that hands back the cookie and the session's CSRF token, and one guarded form. */
function adminApp() {
  const app = new Hono<AdminEnv>()
  app.onError(handleError(createLogger('silent')))
  app.use('/admin/*', sameOriginWrites())
  app.post('/admin/login', async (c) => c.text(sessions.csrfToken(await sessions.start(c, 'ada'))))
  app.use('/admin/replay', requireSession(sessions), requireCsrfToken(sessions))
  app.post('/admin/replay', (c) => c.text(`replayed by ${c.get('session').name} (${c.get('form').note})`))
  return app
}

async function logIn(app: ReturnType<typeof adminApp>) {
  const response = await app.request(`${ORIGIN}/admin/login`, { method: 'POST', headers: { origin: ORIGIN } })
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
  return { cookie, csrf: await response.text() }
}

function post(
  app: ReturnType<typeof adminApp>,
  headers: Record<string, string>,
  form: Record<string, string>,
) {
  return app.request(`${ORIGIN}/admin/replay`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(form).toString(),
  })
}

describe('the admin page guards', () => {
  it('accepts a same-origin form with the session cookie and its CSRF token', async () => {
    const app = adminApp()
    const { cookie, csrf } = await logIn(app)
    const response = await post(
      app,
      { cookie, 'sec-fetch-site': 'same-origin' },
      { [CSRF_FIELD]: csrf, note: 'hi' },
    )
    expect(response.status).toBe(200)
    expect(await response.text()).toBe('replayed by ada (hi)')
  })

  it("refuses a form without the CSRF token, or with another session's, as csrf_invalid", async () => {
    const app = adminApp()
    const { cookie } = await logIn(app)
    const other = await logIn(app)
    const forms: Record<string, string>[] = [{}, { [CSRF_FIELD]: other.csrf }, { [CSRF_FIELD]: 'forged' }]
    for (const form of forms) {
      const response = await post(app, { cookie, origin: ORIGIN }, form)
      expect(response.status).toBe(403)
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('csrf_invalid')
    }
  })

  it.each([
    ['a cross-site fetch', 'cross_origin', { 'sec-fetch-site': 'cross-site' }],
    ['another origin', 'cross_origin', { origin: 'http://evil.test' }],
    // curl's login: no browser header at all, told where scripts go.
    ['neither Sec-Fetch-Site nor Origin', 'origin_required', {}],
  ])('refuses a write from %s as %s, before reading the session', async (_, code, headers) => {
    const app = adminApp()
    const { cookie, csrf } = await logIn(app)
    const response = await post(app, { cookie, ...headers }, { [CSRF_FIELD]: csrf })
    expect(response.status).toBe(403)
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe(code)
  })

  it('answers 401 login_required to a write without a session', async () => {
    const response = await post(adminApp(), { origin: ORIGIN }, { [CSRF_FIELD]: 'x' })
    expect(response.status).toBe(401)
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('login_required')
  })
})
