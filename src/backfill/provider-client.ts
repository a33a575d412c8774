import { backoffDelay } from '../backoff.js'
import { boundedFetch, type WholeAnswer } from './bounded-fetch.js'
import { BackfillError } from './errors.js'

export interface ProviderAnswer {
  status: number
  headers: Headers
  body: unknown
}

export interface ProviderClientOptions {
  /** The provider's name in messages: `Stripe`, `GitHub`. */
  name: string
  baseUrl: string
  headers: Record<string, string>
  /** Where the key came from, for a 401's message. */
  credentialName: string
  /** The longest wait for a rate limit within a pass; a longer one ends the pass. */
  maxWaitMs: number
  /** The first wait after a rate-limit answer that names no time; it doubles with each such answer. */
  defaultRateLimitWaitMs: number
  /** The deadline of one request, its whole body included. */
  timeoutMs: number
  /** The largest body read from one answer. */
  maxResponseBytes: number
  /** Injected by tests that must not wait in real time; setTimeout otherwise. */
  sleep?: (ms: number) => Promise<void>
  now?: () => number
}

export interface ProviderClient {
  request(method: 'GET' | 'POST', pathAndQuery: string): Promise<ProviderAnswer>
}

/** Attempts of one request refused by 5xx, a timeout or the network, before the pass gives up. */
export const UNAVAILABLE_ATTEMPTS = 4
/** Rate-limit answers one request waits out before the pass gives up. */
const RATE_LIMITED_ATTEMPTS = 5
const RETRY_BACKOFF = { baseDelayMs: 250, maxDelayMs: 4000 }

/**
 * One provider API, asked the way its documentation says to: 5xx and network failures retried with
 * a bounded backoff, 429 (and GitHub's 403 with an exhausted limit) waited out for the time the
 * provider names (Retry-After, or X-RateLimit-Reset when X-RateLimit-Remaining is 0) as long as that
 * is within maxWaitMs, and a limit a successful answer reports as exhausted respected before the next
 * request. Each answer is bounded: one deadline covers it whole, body included, and a body over
 * maxResponseBytes is abandoned there. Every other failure is a BackfillError naming what to fix.
 */
export function createProviderClient(options: ProviderClientOptions): ProviderClient {
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)))
  const now = options.now ?? Date.now
  let notBefore = 0
  // No cap: a wait over maxWaitMs ends the pass instead (waitFor), and RATE_LIMITED_ATTEMPTS the doubling.
  const rateLimitBackoff = {
    baseDelayMs: options.defaultRateLimitWaitMs,
    maxDelayMs: Number.POSITIVE_INFINITY,
  }

  const waitFor = async (ms: number, why: string) => {
    if (ms > options.maxWaitMs) {
      throw new BackfillError(
        'rate_limited',
        `${options.name} ${why} and asks to wait ${Math.ceil(ms / 1000)} s, longer than backfill.maxWaitSeconds ` +
          `(${Math.round(options.maxWaitMs / 1000)} s); the next pass resumes from here`,
      )
    }
    if (ms > 0) await sleep(ms)
  }

  const send = async (method: string, url: string): Promise<WholeAnswer> => {
    const path = new URL(url).pathname
    for (let attempt = 1; ; attempt++) {
      const answer = await boundedFetch(method, url, {
        headers: options.headers,
        timeoutMs: options.timeoutMs,
        maxBytes: options.maxResponseBytes,
      })
      if (!('failure' in answer)) return answer
      const failure = answer.failure
      if (failure.kind === 'too_large') {
        // The same page would be as large the next time: a retry only repeats the download.
        throw new BackfillError(
          'response_too_large',
          `${options.name} API answered ${method} ${path} with a body over ${mebibytes(options.maxResponseBytes)} ` +
            `(backfill.maxResponseBytes); it was abandoned after ${mebibytes(failure.bytes)}. Lower backfill.pageSize, ` +
            'or raise backfill.maxResponseBytes if the pages really are that large',
        )
      }
      const said =
        failure.kind === 'timeout'
          ? `did not answer in full within ${options.timeoutMs / 1000} s (backfill.requestTimeoutSeconds)`
          : failure.kind === 'server_error'
            ? `answered ${failure.status}`
            : `did not answer (${failure.message})`
      if (attempt >= UNAVAILABLE_ATTEMPTS) {
        throw new BackfillError(
          'provider_unavailable',
          `${options.name} API ${said} to ${method} ${path}, ${attempt} times; the next pass resumes from here`,
        )
      }
      await sleep(backoffDelay(RETRY_BACKOFF, attempt))
    }
  }

  return {
    async request(method, pathAndQuery) {
      const url = `${options.baseUrl}${pathAndQuery}`
      for (let limited = 1; ; limited++) {
        await waitFor(notBefore - now(), 'reported its rate limit exhausted')
        const response = await send(method, url)
        const text = response.text
        const body = parseJson(text)
        const reset = rateLimitReset(response.headers)
        if (response.status >= 200 && response.status < 300) {
          // Exhausted by this very request: the next one would be refused, so it waits for the reset.
          notBefore = reset ?? 0
          if (body === undefined && text.trim() !== '') {
            throw new BackfillError(
              'invalid_response',
              `${options.name} API answered ${method} ${new URL(url).pathname} with a body that is not JSON`,
            )
          }
          return { status: response.status, headers: response.headers, body }
        }
        const message = providerMessage(body)
        const rateLimited =
          response.status === 429 ||
          (response.status === 403 &&
            (reset !== undefined || response.headers.has('retry-after') || /rate limit/i.test(message)))
        if (rateLimited) {
          if (limited >= RATE_LIMITED_ATTEMPTS) {
            throw new BackfillError(
              'rate_limited',
              `${options.name} API still refuses for its rate limit after ${limited} waits (${response.status}: ${message}); the next pass resumes from here`,
            )
          }
          const wait =
            retryAfterMs(response.headers.get('retry-after'), now()) ??
            (reset === undefined ? backoffDelay(rateLimitBackoff, limited) : reset - now())
          await waitFor(wait, `answered ${response.status} (rate limited: ${message})`)
          continue
        }
        throw refusal(options, response.status, method, new URL(url).pathname, message)
      }
    },
  }
}

function refusal(
  options: ProviderClientOptions,
  status: number,
  method: string,
  path: string,
  message: string,
): BackfillError {
  const said = `(${status}: ${message})`
  if (status === 401) {
    return new BackfillError(
      'unauthorized',
      `${options.name} API rejected the key in ${options.credentialName} ${said}; set a valid key there`,
    )
  }
  if (status === 403) {
    return new BackfillError(
      'forbidden',
      `${options.name} API refused ${method} ${path} for the key in ${options.credentialName} ${said}; the key lacks a permission`,
    )
  }
  if (status === 404) {
    return new BackfillError(
      'not_found',
      `${options.name} API has no ${path} ${said}; check the configured repository and hookId, and that the key can see them`,
    )
  }
  return new BackfillError('request_rejected', `${options.name} API refused ${method} ${path} ${said}`)
}

function mebibytes(bytes: number): string {
  return `${Number((bytes / 1_048_576).toFixed(1))} MiB`
}

/** When X-RateLimit-Remaining is 0: the epoch milliseconds X-RateLimit-Reset names. */
function rateLimitReset(headers: Headers): number | undefined {
  if (headers.get('x-ratelimit-remaining')?.trim() !== '0') return undefined
  const reset = Number(headers.get('x-ratelimit-reset'))
  return Number.isFinite(reset) && reset > 0 ? reset * 1000 : undefined
}

/** Retry-After as seconds or as an HTTP date, in milliseconds from now. */
function retryAfterMs(value: string | null, now: number): number | undefined {
  if (value === null || value.trim() === '') return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** Stripe's `{"error":{"message"}}` or GitHub's `{"message"}`, cut short; the status alone otherwise. */
function providerMessage(body: unknown): string {
  const record = (value: unknown) =>
    typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined
  const nested = record(record(body)?.error)?.message
  const flat = record(body)?.message
  const message = typeof nested === 'string' ? nested : typeof flat === 'string' ? flat : 'no message'
  return message.length > 200 ? `${message.slice(0, 200)}…` : message
}
