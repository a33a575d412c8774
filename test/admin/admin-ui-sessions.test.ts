// Admin sessions end on the server: a copied cookie stops working at logout, and guessing the token
// is throttled per client.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import {
  LOGIN_FAILURES_ALLOWED,
  LOGIN_WINDOW_MS,
  loginClient,
} from '../../src/http/admin-ui/login-throttle.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'

const TOKEN = 'admin-token-for-the-session-tests'

let stack: ApiStack
beforeAll(async () => {
  stack = await createApiStack(testConfig(), { adminToken: TOKEN })
})
afterAll(async () => {
  await stack.close()
})

/** A request as if it came over a socket from `address` (in-process requests have none). */
function from(address: string) {
  return { incoming: { socket: { remoteAddress: address } } }
}

function login(token: string, address = '198.51.100.1') {
  return stack.app.request(
    '/admin/login',
    {
      method: 'POST',
      body: new URLSearchParams({ name: 'ana', token }),
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://localhost' },
    },
    from(address),
  )
}

async function session(address?: string): Promise<string> {
  const response = await login(TOKEN, address)
  expect(response.status).toBe(303)
  return (response.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
}

async function logout(cookie: string, fields: Record<string, string> = {}) {
  const page = await stack.app.request('/admin/events', { headers: { cookie } })
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? ''
  return stack.app.request('/admin/logout', {
    method: 'POST',
    body: new URLSearchParams({ _csrf: csrf, ...fields }),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://localhost', cookie },
  })
}

const status = async (cookie: string) =>
  (await stack.app.request('/admin/events', { headers: { cookie } })).status

describe('revocable sessions', () => {
  it('a copy of the cookie stops working once its session logged out; other sessions go on', async () => {
    const copied = await session()
    const other = await session()
    expect(await status(copied)).toBe(200)
    expect((await logout(copied)).status).toBe(303)
    // The browser dropped the cookie; whoever copied it still sends it, and is sent to log in.
    expect(await status(copied)).toBe(303)
    expect(await status(other)).toBe(200)
    const [row] = await stack.database
      .sql`select count(*)::int as revoked from admin_sessions where revoked_at is not null`
    expect(row?.revoked).toBe(1)
  })

  it('"log out everywhere" revokes every session', async () => {
    const first = await session()
    const second = await session()
    expect((await logout(first, { everywhere: 'yes' })).status).toBe(303)
    expect(await status(first)).toBe(303)
    expect(await status(second)).toBe(303)
  })
})

describe('login throttle', () => {
  it(`answers 429 with Retry-After after ${LOGIN_FAILURES_ALLOWED} failures, even to the right token, per client`, async () => {
    const guesser = '203.0.113.9'
    for (let i = 0; i < LOGIN_FAILURES_ALLOWED; i += 1) {
      expect((await login(`wrong-${i}`, guesser)).status).toBe(401)
    }
    const refused = await login(TOKEN, guesser)
    expect(refused.status).toBe(429)
    expect(refused.headers.get('set-cookie')).toBeNull()
    const retryAfter = Number(refused.headers.get('retry-after'))
    expect(retryAfter).toBeGreaterThan(0)
    expect(retryAfter).toBeLessThanOrEqual(LOGIN_WINDOW_MS / 1000)
    expect(await refused.text()).toContain('Too many failed logins')
    // Another client is not affected.
    expect((await login(TOKEN, '203.0.113.10')).status).toBe(303)
    // Once the window has passed, the client may try again.
    vi.useFakeTimers({ toFake: ['Date'] })
    try {
      vi.setSystemTime(Date.now() + LOGIN_WINDOW_MS + 1000)
      expect((await login(TOKEN, guesser)).status).toBe(303)
    } finally {
      vi.useRealTimers()
    }
  })

  it('counts an IPv6 client by its /64 and an IPv4-mapped one as IPv4', () => {
    const of = (address: string) => loginClient({ env: from(address) } as never)
    expect(of('2001:db8:1:2:aaaa::1')).toBe(of('2001:db8:1:2:bbbb::2'))
    expect(of('2001:db8:1:2::1')).not.toBe(of('2001:db8:1:3::1'))
    expect(of('::ffff:192.0.2.4')).toBe('192.0.2.4')
  })
})
