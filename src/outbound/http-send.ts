import type { IncomingHttpHeaders } from 'node:http'
import { Agent, type Dispatcher, Pool } from 'undici'
import { DestinationRefusedError, guardedLookup } from './ssrf.js'

export interface HttpAnswer {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
}

export type HttpSendResult =
  | { kind: 'answered'; answer: HttpAnswer }
  /** Nothing left this process: refused before connecting, or a request HTTP cannot carry. */
  | { kind: 'not_sent'; error: string }
  /** A timeout, a reset, a refused connection: the request may or may not have been acted on. */
  | { kind: 'no_answer'; error: string }

/** What is kept of an answer's body: its first 64 KiB. */
const MAX_BODY = 64 * 1024

/**
 * Keep-alive connections to one origin, for a caller that sends there again and again (a forward's
 * destination). undici's pool, not node:http's agent: timed on this project's 2-core machine
 * (96 requests in flight, ~0.8 KB POSTs to a local server), a request cost ~200 µs of the sender's
 * CPU against ~370 µs through node:http, whose request and response are each a stream object.
 */
export function connectionPool(origin: string): Dispatcher {
  return new Pool(origin)
}

/** Every other destination: one keep-alive agent for the process, and one that checks addresses. */
const sharedAgent = new Agent()
const guardedAgent = new Agent({ connect: { lookup: guardedLookup } })

/**
 * One HTTP request, never following redirects (a redirect would send the body somewhere nobody
 * configured). `guarded` resolves names through the SSRF-checking lookup. The request stops when any
 * of `signals` aborts or when `timeoutMs` has passed in all, with one timer and plain listeners:
 * `AbortSignal.any` and `AbortSignal.timeout` cost a GC-tracked signal each, which shows on the
 * worker's hot path.
 */
export function sendHttp(
  url: URL,
  options: {
    method: string
    headers: Record<string, string>
    body: Buffer | undefined
    timeoutMs: number
    signals: readonly AbortSignal[]
    guarded: boolean
    /** Keep-alive connections of the caller's own (connectionPool); the process's agent otherwise. */
    connections?: Dispatcher | undefined
  },
): Promise<HttpSendResult> {
  return new Promise((resolve) => {
    // Stopped already: not dispatched at all. On a kept-alive connection undici writes the request
    // within dispatch(), before any later abort could stop it.
    if (options.signals.some((signal) => signal.aborted)) {
      resolve({ kind: 'no_answer', error: 'timed out' })
      return
    }
    const dispatcher = options.guarded ? guardedAgent : (options.connections ?? sharedAgent)
    // undici hands over the request's controller only when it is about to write the request, on a
    // connected socket. A stop before that (a connection still being made, or a pool's queue) is
    // answered at once, not after undici's own 10 s connect timeout, and onRequestStart aborts the
    // request before anything is written.
    let controller: Dispatcher.DispatchController | undefined
    let stopped: Error | undefined
    const stop = (name: string) => () => {
      stopped ??= Object.assign(new Error(name), { name })
      if (controller !== undefined) controller.abort(stopped)
      else settle({ kind: 'no_answer', error: describe(stopped) })
    }
    const timer = setTimeout(stop('TimeoutError'), options.timeoutMs)
    const aborted = stop('AbortError')
    let settled = false
    const settle = (result: HttpSendResult) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      for (const signal of options.signals) signal.removeEventListener('abort', aborted)
      resolve(result)
    }
    for (const signal of options.signals) signal.addEventListener('abort', aborted, { once: true })
    let response: { status: number; headers: IncomingHttpHeaders; chunks: Buffer[]; size: number } | undefined
    const answered = () => {
      if (response === undefined) return
      const { status, headers, chunks } = response
      settle({ kind: 'answered', answer: { status, headers, body: Buffer.concat(chunks) } })
    }
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(started) {
        controller = started
        if (stopped !== undefined) started.abort(stopped)
      },
      onResponseStart(_, status, headers) {
        response = { status, headers, chunks: [], size: 0 }
      },
      onResponseData(_, chunk) {
        if (response === undefined) return
        const room = MAX_BODY - response.size
        if (room > 0) response.chunks.push(chunk.length <= room ? chunk : chunk.subarray(0, room))
        response.size += chunk.length
      },
      onResponseEnd: answered,
      onResponseError(_, error) {
        // An answer cut off after its status line is still the destination's answer.
        if (response !== undefined) return answered()
        settle(
          notSent(error)
            ? { kind: 'not_sent', error: error.message }
            : { kind: 'no_answer', error: describe(error) },
        )
      },
    }
    try {
      dispatcher.dispatch(
        {
          origin: url.origin,
          path: `${url.pathname}${url.search}`,
          method: options.method as Dispatcher.HttpMethod,
          headers: withUrlCredentials(url, options.headers),
          body: options.body ?? null,
          // The timer above bounds the whole request; undici's own limits only back it up.
          headersTimeout: options.timeoutMs + 1000,
          bodyTimeout: options.timeoutMs + 1000,
        },
        handler,
      )
    } catch (error) {
      // A request undici cannot even queue: nothing was sent.
      settle({ kind: 'not_sent', error: error instanceof Error ? error.message : String(error) })
    }
  })
}

/**
 * A URL's user and password as Basic authorization, as node:http sends them (undici takes only the
 * origin and path): a destination configured as `https://user:secret@host/hook` keeps working. An
 * Authorization header given explicitly wins.
 */
function withUrlCredentials(url: URL, headers: Record<string, string>): Record<string, string> {
  if (url.username === '' && url.password === '') return headers
  if (Object.keys(headers).some((name) => name.toLowerCase() === 'authorization')) return headers
  const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`
  return { ...headers, authorization: `Basic ${Buffer.from(credentials).toString('base64')}` }
}

/**
 * Errors that prove nothing left this process: an address the SSRF lookup refused, or a request undici
 * would not write (a header HTTP forbids, say), refused when the request is made, before any socket.
 */
function notSent(error: Error): boolean {
  if (error instanceof DestinationRefusedError || error.cause instanceof DestinationRefusedError) return true
  return (error as NodeJS.ErrnoException).code === 'UND_ERR_INVALID_ARG'
}

function describe(error: Error): string {
  if (error.name === 'AbortError' || error.name === 'TimeoutError') return 'timed out'
  const code = (error as NodeJS.ErrnoException).code
  return code === undefined ? error.message : `${error.message} (${code})`
}

/**
 * The classification of an answer: 2xx happened; 4xx definitely did not, except 408 (timeout),
 * 409 (a key still in progress) and 429 (rate limited before the idempotency layer), which say
 * nothing certain; 3xx (not followed), 5xx and anything else are unknown.
 */
export function classifyStatus(status: number): 'success' | 'rejection' | 'unknown' {
  if (status >= 200 && status <= 299) return 'success'
  if (status >= 400 && status <= 499 && status !== 408 && status !== 409 && status !== 429) return 'rejection'
  return 'unknown'
}

/**
 * How long a 429 or 503 answer asks the sender to wait (RFC 9110 Retry-After: seconds, or an HTTP
 * date), capped at a day so a wrong header cannot park deliveries for ever. Undefined otherwise.
 */
export function retryAfterMs(
  answer: Pick<HttpAnswer, 'status' | 'headers'>,
  now = Date.now(),
): number | undefined {
  if (answer.status !== 429 && answer.status !== 503) return undefined
  const header = answer.headers['retry-after']
  if (typeof header !== 'string' || header.trim() === '') return undefined
  const value = header.trim()
  const ms = /^[0-9]+$/.test(value) ? Number(value) * 1000 : Date.parse(value) - now
  if (!Number.isFinite(ms)) return undefined
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS)
}

const MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000
