import type { MiddlewareHandler } from 'hono'
import { bodyLimit } from 'hono/body-limit'
import { ApiError } from '../errors.js'

/**
 * Refuses a body larger than `maxSize` with 413 `payload_too_large`, before reading it (declared
 * length) or as soon as it grows past the limit (chunked). The answer says `Connection: close`: the
 * unread rest of the body is still on the socket, so the server closes it, and a client told
 * keep-alive would send its next request into a socket about to be reset.
 */
export function limitBody(maxSize: number, what: string): MiddlewareHandler {
  return bodyLimit({
    maxSize,
    onError: () => {
      throw payloadTooLarge(`${what} accepts bodies of at most ${maxSize} bytes`)
    },
  })
}

export function payloadTooLarge(message: string): ApiError {
  return new ApiError(413, 'payload_too_large', message, { headers: { Connection: 'close' } })
}
