import { type Agent, request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { DestinationRefusedError, guardedLookup } from './ssrf.js'

export interface HttpAnswer {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
}

export type HttpSendResult =
  | { kind: 'answered'; answer: HttpAnswer }
  /** Nothing left this process: refused before connecting. */
  | { kind: 'not_sent'; error: string }
  /** A timeout, a reset, a refused connection: the request may or may not have been acted on. */
  | { kind: 'no_answer'; error: string }

const MAX_BODY = 64 * 1024

/**
 * One HTTP request with node:http, which never follows redirects (a redirect would send the body
 * somewhere nobody configured). `guarded` resolves names through the SSRF-checking lookup. The
 * request stops when any of `signals` aborts or when `timeoutMs` has passed in all, with one timer
 * and plain listeners: `AbortSignal.any` and `AbortSignal.timeout` cost a GC-tracked signal each,
 * which shows on the worker's hot path.
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
    /** Keep-alive connections of the caller's own; Node's global agent otherwise. */
    agent?: Agent | undefined
  },
): Promise<HttpSendResult> {
  return new Promise((resolve) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest
    const headers = { ...options.headers }
    if (options.body !== undefined) headers['content-length'] = String(options.body.length)
    const request = send(url, {
      method: options.method,
      headers,
      timeout: options.timeoutMs,
      ...(options.agent === undefined ? {} : { agent: options.agent }),
      ...(options.guarded ? { lookup: guardedLookup } : {}),
    })
    const stop = (name: string) => () => request.destroy(Object.assign(new Error(name), { name }))
    const timer = setTimeout(stop('TimeoutError'), options.timeoutMs)
    const aborted = stop('AbortError')
    const settle = (result: HttpSendResult) => {
      clearTimeout(timer)
      for (const signal of options.signals) signal.removeEventListener('abort', aborted)
      resolve(result)
    }
    for (const signal of options.signals) {
      if (signal.aborted) queueMicrotask(aborted)
      else signal.addEventListener('abort', aborted, { once: true })
    }
    request.on('timeout', () => request.destroy(new Error(`no answer within ${options.timeoutMs} ms`)))
    request.on('error', (error) => {
      const refused =
        error instanceof DestinationRefusedError || error.cause instanceof DestinationRefusedError
      settle(
        refused ? { kind: 'not_sent', error: error.message } : { kind: 'no_answer', error: describe(error) },
      )
    })
    request.on('response', (response) => {
      const chunks: Buffer[] = []
      let size = 0
      const answered = () =>
        settle({
          kind: 'answered',
          answer: {
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: Buffer.concat(chunks),
          },
        })
      response.on('data', (chunk: Buffer) => {
        size += chunk.length
        if (size <= MAX_BODY) chunks.push(chunk)
      })
      // An answer cut off after its status line is still the destination's answer.
      response.on('error', answered)
      response.on('end', answered)
    })
    request.end(options.body)
  })
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
