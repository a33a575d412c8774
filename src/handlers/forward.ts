import type { HandlerConfig } from '../config/config.js'
import { type EventHandler, HandlerError } from './types.js'

const EXCERPT_CHARS = 512

/**
 * Forwards the original bytes and signature headers to the configured URL, so the destination can
 * verify the provider's signature itself. `Idempotency-Key: <source>:<event id>` lets it drop the
 * repeats that at-least-once delivery still allows (a crash after its 2xx, before DONE commits).
 */
export function forwardHandler(config: Extract<HandlerConfig, { type: 'forward' }>): EventHandler {
  return async ({ source, eventId, raw, headers, attempt, signal }) => {
    const outgoing: Record<string, string> = {
      ...headers,
      'content-type': headers['content-type'] ?? 'application/json',
      'idempotency-key': `${source}:${eventId}`,
      'x-hookledger-source': source,
      'x-hookledger-event-id': eventId,
      'x-hookledger-attempt': String(attempt),
    }
    delete outgoing['user-agent']
    let response: Response
    try {
      response = await fetch(config.url, {
        method: 'POST',
        body: raw,
        headers: outgoing,
        // A redirect is a failure: following it would send the signed body somewhere not configured.
        redirect: 'manual',
        signal: AbortSignal.any([signal, AbortSignal.timeout(config.timeoutMs)]),
      })
    } catch (error) {
      throw new HandlerError(`forward to ${config.url} failed: ${describeFetchError(error)}`)
    }
    const excerpt = (await response.text().catch(() => '')).slice(0, EXCERPT_CHARS)
    const details = { responseStatus: response.status, responseExcerpt: excerpt }
    if (response.status < 200 || response.status > 299) {
      throw new HandlerError(`forward to ${config.url} answered ${response.status}`, details)
    }
    return details
  }
}

function describeFetchError(error: unknown): string {
  if (error instanceof Error) {
    if (error.name === 'TimeoutError') return 'timed out'
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : ''
    return `${error.message}${cause}`
  }
  return String(error)
}
