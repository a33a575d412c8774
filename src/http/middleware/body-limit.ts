import type { MiddlewareHandler } from 'hono'
import { bodyLimit } from 'hono/body-limit'
import { ApiError } from '../errors.js'

/**
 * Refuses a body larger than `maxSize` with 413 `payload_too_large`, before reading it (declared
 * length) or as soon as it grows past the limit (chunked). The answer says `Connection: close`: the
 * unread rest of the body is still on the socket, so the server closes it, and a client told
 * keep-alive would send its next request into a socket about to be reset.
 *
 * A declared length is checked from the header alone. Hono's `bodyLimit` looks at `c.req.raw.body`
 * first, which makes @hono/node-server build a full web `Request` with a stream over the socket for
 * every request; the body was then read through that stream instead of straight from Node's request.
 * On the webhook route that was ~9 % of the intake's CPU, and more in garbage collection
 * (`BENCH_CPU_PROF`). Only a body without a declared length goes through it.
 */
export function limitBody(maxSize: number, what: string): MiddlewareHandler {
  const tooLarge = () => {
    throw payloadTooLarge(`${what} accepts bodies of at most ${maxSize} bytes`)
  }
  const streamed = bodyLimit({ maxSize, onError: tooLarge })
  return async (c, next) => {
    const declared = c.req.header('content-length')
    if (declared === undefined || c.req.header('transfer-encoding') !== undefined) return streamed(c, next)
    if (Number.parseInt(declared, 10) > maxSize) tooLarge()
    return next()
  }
}

export function payloadTooLarge(message: string): ApiError {
  return new ApiError(413, 'payload_too_large', message, { headers: { Connection: 'close' } })
}
