import type { Context } from 'hono'
import { HTTPException } from 'hono/http-exception'
import type { RequestIdVariables } from 'hono/request-id'
import type { ContentfulStatusCode } from 'hono/utils/http-status'
import type { Refusal } from '../inbound/backpressure.js'
import type { Logger } from '../logger.js'

/** The one error type the HTTP edge raises; the one handler below writes it as `{error:{code,message}}`. */
export class ApiError extends Error {
  readonly headers: Record<string, string>

  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    options: { headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause })
    this.headers = options.headers ?? {}
    this.name = 'ApiError'
  }
}

/** A refusal by backpressure: 429 with `Retry-After`, which providers and agents honour. */
export function busy(refusal: Refusal): ApiError {
  return new ApiError(429, 'ledger_busy', refusal.message, {
    headers: { 'Retry-After': String(refusal.retryAfterSeconds) },
  })
}

export function errorBody(code: string, message: string) {
  return { error: { code, message } }
}

/** Maps every thrown error to the contract's shape; only 5xx are logged, with their stack. */
export function handleError(logger: Logger) {
  return (error: Error, c: Context) => {
    if (error instanceof ApiError) {
      if (error.status >= 500) {
        logger.error(
          { err: error.cause ?? error, path: c.req.path, requestId: requestIdOf(c) },
          error.message,
        )
      }
      return c.json(errorBody(error.code, error.message), error.status, error.headers)
    }
    if (error instanceof HTTPException && error.status === 413) {
      // The unread body stays on the socket, which is closed: say so, or the client reuses it.
      return c.json(errorBody('payload_too_large', 'the body is larger than this route accepts'), 413, {
        Connection: 'close',
      })
    }
    if (error instanceof HTTPException && error.status < 500) {
      return c.json(
        errorBody('bad_request', error.message || 'bad request'),
        error.status as ContentfulStatusCode,
      )
    }
    if (isClientAbort(error, c)) {
      // The caller hung up mid-request (a provider's timeout, a dropped connection): nothing failed
      // here and nobody reads the answer, so it is not an error to page on.
      logger.debug(
        { path: c.req.path, requestId: requestIdOf(c) },
        'client closed the connection mid-request',
      )
      return c.json(errorBody('client_closed_request', 'the client closed the connection'), 400)
    }
    logger.error({ err: error, path: c.req.path, requestId: requestIdOf(c) }, 'unhandled error')
    return c.json(errorBody('internal_error', 'internal error'), 500)
  }
}

/**
 * Node rejects a body read with `Error('aborted')`, code ECONNRESET, when the client closes the
 * socket before sending it all (and a stream pipeline with ERR_STREAM_PREMATURE_CLOSE).
 */
function isClientAbort(error: Error, c: Context): boolean {
  if (c.req.raw.signal.aborted) return true
  for (let current: unknown = error; current instanceof Error; current = current.cause) {
    const code = (current as NodeJS.ErrnoException).code
    if (code === 'ERR_STREAM_PREMATURE_CLOSE') return true
    if (code === 'ECONNRESET' && current.message === 'aborted') return true
  }
  return false
}

/** Set by the request-id middleware; absent for errors raised before it ran. */
function requestIdOf(c: Context<{ Variables: Partial<RequestIdVariables> }>): string | undefined {
  return c.get('requestId')
}
