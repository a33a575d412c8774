import type { Context, MiddlewareHandler } from 'hono'
import { ApiError } from '../errors.js'
import { type AdminSession, type AdminSessions, CSRF_FIELD, isSameOrigin } from './session.js'

export interface AdminEnv {
  Variables: {
    session: AdminSession
    /** This session's CSRF token, for the forms a page renders. */
    csrf: string
    /** The parsed form of a POST, after its CSRF token was checked. */
    form: Record<string, string>
  }
}

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS'])

// The page has no script, no image and no frame, so its policy can forbid them all: an injection
// that slipped past the escaping would find nothing to run. The queue board brings its own scripts
// and gets only the framing and caching rules.
const PAGE_POLICY =
  "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

/** Security headers of every admin response; pages hold payloads and headers, so nothing caches them. */
export function pageHeaders(): MiddlewareHandler {
  return async (c, next) => {
    await next()
    c.res.headers.set('X-Frame-Options', 'DENY')
    c.res.headers.set('X-Content-Type-Options', 'nosniff')
    c.res.headers.set('Referrer-Policy', 'same-origin')
    const html = (c.res.headers.get('content-type') ?? '').startsWith('text/html')
    if (html) c.res.headers.set('Cache-Control', 'no-store')
    if (html && !c.req.path.startsWith('/admin/queues'))
      c.res.headers.set('Content-Security-Policy', PAGE_POLICY)
  }
}

/** No ADMIN_TOKEN: the page is off, never open. 404, so an unconfigured server does not advertise it. */
export function adminOff(): MiddlewareHandler {
  return async () => {
    throw new ApiError(404, 'admin_disabled', 'the admin page is off: set ADMIN_TOKEN to enable it')
  }
}

/**
 * Refuses a state-changing request that a page of another origin made: SameSite=Strict already
 * keeps the cookie off such requests; this also covers the login form (no cookie yet) and browsers
 * that ignore SameSite.
 */
export function sameOriginWrites(): MiddlewareHandler {
  return async (c, next) => {
    if (!SAFE.has(c.req.method) && !isSameOrigin(c)) {
      // A browser names where a write comes from; a request naming nothing is a script's (curl's),
      // which belongs on the bearer API instead.
      if (c.req.header('sec-fetch-site') === undefined && c.req.header('origin') === undefined) {
        throw new ApiError(
          403,
          'origin_required',
          "state-changing admin page requests need the page's Origin header; scripts use /admin/api/… with ADMIN_TOKEN as a bearer token",
        )
      }
      throw new ApiError(
        403,
        'cross_origin',
        'state-changing admin requests must come from the admin page itself',
      )
    }
    await next()
  }
}

/** A valid session or no entry: a person's page view goes to the login form, anything else gets 401. */
export function requireSession(sessions: AdminSessions): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const session = await sessions.read(c)
    if (session === undefined) {
      if (SAFE.has(c.req.method) && !c.req.path.startsWith('/admin/queues/api')) {
        return c.redirect(`/admin/login?${new URLSearchParams({ next: pathWithQuery(c) })}`, 303)
      }
      throw new ApiError(401, 'login_required', 'log in at /admin/login first')
    }
    c.set('session', session)
    c.set('csrf', sessions.csrfToken(session))
    await next()
  }
}

/**
 * Every form POST carries the session's CSRF token (an HMAC of the session, so another site can
 * neither read nor guess it); the form is parsed here once and handed on.
 */
export function requireCsrfToken(sessions: AdminSessions): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const form = await readForm(c)
    if (!sessions.csrfMatches(c.get('session'), form[CSRF_FIELD])) {
      throw new ApiError(
        403,
        'csrf_invalid',
        'the form is stale or was not made by this page: reload it and try again',
      )
    }
    c.set('form', form)
    await next()
  }
}

/** The string fields of a url-encoded or multipart form; anything else reads as empty. */
export async function readForm(c: Context): Promise<Record<string, string>> {
  const type = c.req.header('content-type') ?? ''
  if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(type)) return {}
  const body = await c.req.parseBody()
  const form: Record<string, string> = {}
  for (const [name, value] of Object.entries(body)) if (typeof value === 'string') form[name] = value
  return form
}

/** Only a path of this page: an absolute or protocol-relative `next` would make the login an open redirect. */
export function safeNext(next: string | undefined): string {
  if (
    next === undefined ||
    !(next === '/admin' || next.startsWith('/admin/')) ||
    // A backslash is a slash to browsers; a control character cannot go into a Location header.
    /[\\\p{Cc}]/u.test(next)
  ) {
    // The overview: what a person logging in wants first (what is stuck, failing, waiting).
    return '/admin'
  }
  return next
}

function pathWithQuery(c: Context): string {
  const url = new URL(c.req.url)
  return `${url.pathname}${url.search}`
}
