import { createHash, createHmac, randomUUID, timingSafeEqual } from 'node:crypto'
import type { Context } from 'hono'
import { deleteCookie, getSignedCookie, setSignedCookie } from 'hono/cookie'
import { z } from 'zod'
import {
  isAdminSessionLive,
  revokeAdminSession,
  revokeAllAdminSessions,
  startAdminSession,
} from '../../db/admin-sessions.js'
import type { Database } from '../../db/client.js'

/** A person logged in to the admin page; `name` is recorded as `by` in replays and decisions. */
export interface AdminSession {
  name: string
  /** Unix milliseconds. */
  expires: number
  /** The admin_sessions row: random per login, so each session has its own CSRF token and can be revoked. */
  nonce: string
}

export const SESSION_COOKIE = 'hl_admin'
export const SESSION_TTL_MS = 12 * 3600 * 1000
/** The field every state-changing form carries. */
export const CSRF_FIELD = '_csrf'

const sessionPayload = z.object({
  n: z.string().min(1).max(100),
  e: z.number().int(),
  s: z.string().min(16).max(64),
})

export const operatorName = z
  .string()
  .trim()
  .min(1, 'enter your name: it is recorded with every replay and decision')
  .max(100, 'the name must be at most 100 characters')
  .regex(/^[^\p{Cc}]+$/u, 'the name must not contain control characters')

export interface AdminSessions {
  /** Constant time: both sides are hashed first, so neither length nor prefix leaks. */
  tokenMatches(candidate: string): boolean
  start(c: Context, name: string): Promise<AdminSession>
  read(c: Context): Promise<AdminSession | undefined>
  /** Revokes this session (every copy of its cookie) and deletes the cookie. */
  end(c: Context, session: AdminSession): Promise<void>
  /** Revokes every session of the page, this one included: for a cookie that may have leaked. */
  endEverywhere(c: Context): Promise<void>
  csrfToken(session: AdminSession): string
  csrfMatches(session: AdminSession, candidate: string | undefined): boolean
}

/**
 * Sessions of the admin page, all derived from ADMIN_TOKEN: the cookie's signing key and the CSRF
 * key are HMACs of it, so rotating the token logs everyone out and no second secret has to be
 * configured. The cookie is HttpOnly (scripts never see it), SameSite=Strict (other sites' pages
 * never send it) and scoped to /admin. It names a row of admin_sessions, checked on every request:
 * a signature alone cannot be taken back, the row can.
 */
export function adminSessions(adminToken: string, db: Database): AdminSessions {
  const expected = sha256(adminToken)
  const cookieKey = createHmac('sha256', adminToken).update('hookledger admin session cookie v1').digest()
  const csrfKey = createHmac('sha256', adminToken).update('hookledger admin csrf v1').digest()
  const csrfToken = (session: AdminSession) =>
    createHmac('sha256', csrfKey).update(`${session.nonce}.${session.expires}`).digest('base64url')

  return {
    tokenMatches: (candidate) => timingSafeEqual(sha256(candidate), expected),
    async start(c, name) {
      const session = { name, expires: Date.now() + SESSION_TTL_MS, nonce: randomUUID() }
      await startAdminSession(db, { id: session.nonce, name, expiresAt: new Date(session.expires) })
      const value = Buffer.from(
        JSON.stringify({ n: session.name, e: session.expires, s: session.nonce }),
      ).toString('base64url')
      await setSignedCookie(c, SESSION_COOKIE, value, cookieKey, {
        httpOnly: true,
        sameSite: 'Strict',
        path: '/admin',
        secure: isHttps(c),
        maxAge: Math.floor(SESSION_TTL_MS / 1000),
      })
      return session
    },
    async read(c) {
      const value = await getSignedCookie(c, cookieKey, SESSION_COOKIE)
      if (typeof value !== 'string') return undefined
      let payload: unknown
      try {
        payload = JSON.parse(Buffer.from(value, 'base64url').toString('utf8'))
      } catch {
        return undefined
      }
      const parsed = sessionPayload.safeParse(payload)
      // The signature proves we issued it; the expiry inside it (not the cookie's Max-Age, which
      // the client controls) decides how long it lasts.
      if (!parsed.success || parsed.data.e <= Date.now() || !isUuid(parsed.data.s)) return undefined
      if (!(await isAdminSessionLive(db, parsed.data.s))) return undefined
      return { name: parsed.data.n, expires: parsed.data.e, nonce: parsed.data.s }
    },
    async end(c, session) {
      await revokeAdminSession(db, session.nonce)
      deleteSessionCookie(c)
    },
    async endEverywhere(c) {
      await revokeAllAdminSessions(db)
      deleteSessionCookie(c)
    },
    csrfToken,
    csrfMatches(session, candidate) {
      if (candidate === undefined) return false
      return timingSafeEqual(sha256(candidate), sha256(csrfToken(session)))
    },
  }
}

/**
 * Whether a state-changing request comes from a page of this origin. Browsers send Sec-Fetch-Site
 * (and Origin on every POST); a request with neither is refused, since a browser form always has
 * them and scripts have the bearer API.
 */
export function isSameOrigin(c: Context): boolean {
  const site = c.req.header('sec-fetch-site')
  if (site !== undefined) return site === 'same-origin'
  const origin = c.req.header('origin')
  return origin !== undefined && origin === new URL(c.req.url).origin
}

function deleteSessionCookie(c: Context): void {
  deleteCookie(c, SESSION_COOKIE, { path: '/admin', httpOnly: true, sameSite: 'Strict', secure: isHttps(c) })
}

/** Cookies signed before sessions had rows carried a hex nonce: they read as logged out, not as an error. */
function isUuid(value: string): boolean {
  return z.uuid().safeParse(value).success
}

/** https directly, or behind a proxy that terminated TLS: only then may the cookie be Secure-only. */
export function isHttps(c: Context): boolean {
  return new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https'
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value).digest()
}
