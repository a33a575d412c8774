import { createHash, timingSafeEqual } from 'node:crypto'
import type { MiddlewareHandler } from 'hono'
import { ApiError } from '../errors.js'

/**
 * Bearer-token auth that fails closed: with no token configured every request is refused (the API
 * is off, never open), and tokens are compared as sha256 digests with timingSafeEqual, so neither
 * the length nor a prefix of the token leaks through timing.
 */
export function bearerAuth(token: string | undefined, what: string, variable: string): MiddlewareHandler {
  const expected = token === undefined ? undefined : digest(token)
  return async (c, next) => {
    if (expected === undefined) {
      throw new ApiError(403, 'api_disabled', `the ${what} is off: set ${variable} to enable it`)
    }
    const header = c.req.header('authorization') ?? ''
    const match = /^Bearer\s+(\S+)$/i.exec(header)
    if (match?.[1] === undefined || !timingSafeEqual(digest(match[1]), expected)) {
      throw new ApiError(401, 'unauthorized', `a valid bearer token is required for the ${what}`, {
        headers: { 'WWW-Authenticate': 'Bearer' },
      })
    }
    await next()
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest()
}
