import { createHash } from 'node:crypto'
import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { type RouteForward, routeForwardSchema } from '../config/routes.js'
import type { EventHandler } from '../outbound/event-handler.js'
import { classifyStatus, connectionPool, retryAfterMs, sendHttp } from '../outbound/http-send.js'
import type { InvokeOutcome } from '../outbound/outcomes.js'
import { defineTool, type ExecuteResult, type Tool } from '../outbound/tools.js'
import { HandlerError, type HandlerResult, RetryLaterError } from '../queue/handler.js'
import { type TraceScope, traceparentOf } from '../tracing.js'
import type { Destination } from './guard.js'

const EXCERPT_CHARS = 512

/** Where a forward handler in code sends (`forwardHandler`): a route forward's url, time limit and headers. */
export type ForwardConfig = Pick<RouteForward, 'url' | 'timeoutMs' | 'headers'>

/**
 * What the forward operation is identified and compared by: the event and a hash of the exact bytes
 * received. Stable across retries (no attempt number in here), so the hash never conflicts. The bytes
 * and headers themselves stay in the event's row, which never changes: the ledger keeps no second
 * copy of every body, and an operation key reused with another body is still a payload conflict.
 */
export interface ForwardArgs {
  source: string
  eventId: string
  bodySha256: string
}

/** The delivery a forward sends: the original bytes and the headers kept on the event's row. */
export interface Delivery {
  raw: Buffer
  headers: Readonly<Record<string, string>>
  /**
   * The `Idempotency-Key` to send; `<source>:<event id>` without it. A route sends
   * `<source>:<event id>:<route id>`, so two routes to one destination that honours the header
   * are two deliveries, not one and a dropped repeat.
   */
  idempotencyKey?: string | undefined
  /**
   * The event's handler deadline. The send stops at whichever comes first, it or the forward's own
   * timeout, so no setting of the two leaves a forward running after its attempt was given up.
   */
  signal?: AbortSignal | undefined
  /**
   * Every answer but a 2xx leaves the operation open to a later send (exhausted) instead of failing
   * it for good on a 4xx, as Hookdeck and Convoy retry routes: the event's next attempt, a replay, or
   * a route re-enabled after a 410 Gone sends again. Without it a 4xx is a definite rejection.
   */
  rejectionsStayOpen?: boolean
  /** The forward span's W3C traceparent, sent so the destination's trace continues it. */
  traceparent?: string | undefined
  /** Told of each send that went out: what the destination answered, or undefined for no answer. */
  answered?: ((answer: ForwardResult | undefined) => void) | undefined
}

export interface ForwardResult {
  status: number
  excerpt: string
  /** From a 429 or 503 answer's Retry-After. */
  retryAfterMs?: number
}

/**
 * How a forward went, as its callers read it: the outbound ledger's answer (a route's forward, a
 * forward in code), or the same answer for a send made outside the ledger (a source's own forward,
 * guarded by its event's row: forwardOnce), which has no operation.
 */
export type ForwardOutcome = WithoutOperation<InvokeOutcome<ForwardResult>>
type WithoutOperation<T> = T extends unknown ? Omit<T, 'operationId'> : never

/** The forward's tool name. */
export const FORWARD_TOOL = 'forward'

/**
 * The forward destination as an idempotent HTTP tool, for a forward through the outbound ledger (a
 * route's, or `forwardHandler` in code). One send per invoke: the inbound worker's own attempts and
 * backoff are the retry loop, and each of its attempts starts a new bounded round. The URL comes from
 * the operator's config, so it is trusted (no SSRF check).
 */
export function forwardTool(destination: Destination, delivery: Delivery): Tool<ForwardArgs, ForwardResult> {
  return defineTool<ForwardArgs, ForwardResult>({
    name: FORWARD_TOOL,
    effect: 'idempotent',
    timeoutMs: forwardToolTimeoutMs(destination.forward),
    retry: { attempts: 1 },
    execute: (args, ctx) =>
      sendForward(
        destination,
        delivery,
        args,
        ctx.attempt,
        delivery.signal === undefined ? [ctx.signal] : [ctx.signal, delivery.signal],
      ),
  })
}

/**
 * One send of an event's original bytes and kept headers to a forward's destination.
 * `Idempotency-Key: <source>:<event id>` (a route's: `…:<route id>`) lets the destination drop the
 * repeats that an at-least-once send leaves. `signals` stop the send besides its own timeout.
 */
async function sendForward(
  destination: Destination,
  delivery: Delivery,
  event: Pick<ForwardArgs, 'source' | 'eventId'>,
  attempt: number,
  signals: readonly AbortSignal[],
): Promise<ExecuteResult<ForwardResult>> {
  const config = destination.forward
  // Built by assignment, the user agent left out rather than deleted: a spread and a `delete`
  // per forward cost ~5 µs of the worker's CPU, and a deleted key leaves a slower object to
  // every reader of the headers after.
  const outgoing: Record<string, string> = {}
  copyHeaders(outgoing, delivery.headers)
  outgoing['content-type'] ??= 'application/json'
  outgoing['idempotency-key'] = delivery.idempotencyKey ?? `${event.source}:${event.eventId}`
  outgoing['x-hookledger-source'] = event.source
  outgoing['x-hookledger-event-id'] = event.eventId
  outgoing['x-hookledger-attempt'] = String(attempt)
  if (delivery.traceparent !== undefined) outgoing.traceparent = delivery.traceparent
  copyHeaders(outgoing, config.headers)
  const sent = await sendHttp(destination.url, {
    connections: destination.connections,
    method: 'POST',
    headers: outgoing,
    body: delivery.raw,
    timeoutMs: config.timeoutMs,
    signals,
    guarded: false,
  })
  if (sent.kind !== 'answered') {
    if (sent.kind === 'no_answer') delivery.answered?.(undefined)
    return {
      kind: sent.kind === 'not_sent' ? 'rejection' : 'unknown',
      error: `forward to ${config.url} failed: ${sent.error}`,
    }
  }
  const waitMs = retryAfterMs(sent.answer)
  const result: ForwardResult = {
    status: sent.answer.status,
    excerpt: storableExcerpt(sent.answer.body),
    ...(waitMs === undefined ? {} : { retryAfterMs: waitMs }),
  }
  delivery.answered?.(result)
  const classified = classifyStatus(result.status)
  const kind = classified === 'rejection' && delivery.rejectionsStayOpen === true ? 'unknown' : classified
  if (kind === 'success') return { kind, result }
  return { kind, error: `forward to ${config.url} answered ${result.status}`, details: result }
}

/**
 * One send outside the outbound ledger, answered as the ledger answers a forward's one-attempt round:
 * `completed`, `failed` (rejected: nothing was sent) or `exhausted` (no answer, or an answer not
 * 2xx). The event's row is its ledger entry: its lease keeps other workers off it, its attempts
 * bound the sends, and its DONE records the success.
 */
export async function forwardOnce(
  destination: Destination,
  delivery: Delivery,
  event: Pick<ForwardArgs, 'source' | 'eventId'>,
  attempt: number,
): Promise<ForwardOutcome> {
  const sent = await sendForward(
    destination,
    delivery,
    event,
    attempt,
    delivery.signal === undefined ? [] : [delivery.signal],
  )
  switch (sent.kind) {
    case 'success':
      return { kind: 'completed', result: sent.result, downstreamId: null, replayed: false }
    case 'rejection':
      return { kind: 'failed', reason: 'rejected', error: sent.error, details: sent.details }
    case 'unknown':
      return { kind: 'exhausted', attempts: attempt, error: sent.error, details: sent.details }
    default:
      return sent satisfies never
  }
}

/** The forward tool's own time limit: the send's, plus a margin to record what it answered. */
export function forwardToolTimeoutMs(config: Pick<RouteForward, 'timeoutMs'>): number {
  return config.timeoutMs + 1000
}

/** Copies `headers` into `into`, all but `user-agent`: the provider's, kept on the row for replays, is not sent on. */
function copyHeaders(into: Record<string, string>, headers: Readonly<Record<string, string>> | undefined) {
  if (headers === undefined) return
  for (const name of Object.keys(headers)) {
    if (name !== 'user-agent') into[name] = headers[name] as string
  }
}

/** A configured forward's destination, with its connection pool: made once, not once per event. */
export function forwardDestination(id: string, forward: RouteForward): Destination {
  const url = new URL(forward.url)
  return { id, forward, url, connections: connectionPool(url.origin) }
}

/**
 * The start of a destination's answer as text Postgres can store: a NUL, or half of a surrogate pair
 * cut at the limit, would make the statement that records it fail (jsonb refuses both).
 */
function storableExcerpt(body: Buffer): string {
  return (
    body
      .toString('utf8')
      .slice(0, EXCERPT_CHARS)
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the NUL is exactly what must not reach Postgres
      .replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd')
  )
}

/**
 * Forwards the original bytes and signature headers to `config.url` from a handler registered in
 * code, as one idempotent tool call through the outbound ledger (key `<source>:<event id>:forward`):
 * a forward that completed is never sent again, also when the worker crashed after the destination's
 * 2xx and before DONE committed. Code has no destination guard: a source that only forwards says
 * `handler: { type: 'forward' }` in its config instead, whose forward is guarded as a route's is.
 */
export function forwardHandler(config: ForwardConfig): EventHandler {
  const forward = routeForwardSchema.parse({
    url: config.url,
    timeoutMs: config.timeoutMs,
    headers: config.headers,
  })
  const destination = forwardDestination(config.url, forward)
  return async ({ source, eventId, raw, headers, signal, invoke, trace }) => {
    const outcome = await tracedForward(trace, destination, undefined, (traceparent) =>
      invoke(
        forwardTool(destination, { raw, headers, signal, traceparent }),
        FORWARD_STEP,
        forwardArgs(source, eventId, raw),
      ),
    )
    if (outcome.kind === 'completed') return attemptFacts(outcome.result)
    if (outcome.kind === 'retry_later') {
      // Not this event's failure: another worker's lease on the forward has to run out first.
      throw new RetryLaterError(describeOutcome(outcome), outcome.retryAfterMs)
    }
    throw new HandlerError(describeOutcome(outcome), detailsOf(outcome))
  }
}

/** The step of a forward in code (forwardHandler), under the event's key: `<source>:<event id>:forward`. */
export const FORWARD_STEP = 'forward'

/** The forward's span name. */
export const FORWARD_SPAN = 'forward'

/**
 * Runs a forward's invoke in a span under the worker's (none when `trace` is undefined: tracing off),
 * and gives `send` that span's traceparent for the destination. The span names the destination's
 * host only: a configured URL may carry a token in its path or query.
 */
export async function tracedForward<O extends ForwardOutcome>(
  trace: TraceScope | undefined,
  destination: Destination,
  routeId: string | undefined,
  send: (traceparent: string | undefined) => Promise<O>,
): Promise<O> {
  if (trace === undefined) return send(undefined)
  const span = trace.tracer.startSpan(FORWARD_SPAN, { kind: SpanKind.CLIENT }, trace.context)
  try {
    const outcome = await send(traceparentOf(span))
    if (span.isRecording()) {
      const status = outcome.kind === 'completed' ? outcome.result.status : detailsOf(outcome).responseStatus
      span.setAttributes({
        'http.request.method': 'POST',
        'server.address': destination.url.host,
        'hookledger.outcome': outcome.kind,
        ...(routeId === undefined ? {} : { 'hookledger.route': routeId }),
        ...(typeof status === 'number' ? { 'http.response.status_code': status } : {}),
      })
      if (outcome.kind !== 'completed' && outcome.kind !== 'retry_later') {
        span.setStatus({ code: SpanStatusCode.ERROR, message: describeOutcome(outcome).slice(0, 500) })
      }
    }
    return outcome
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR })
    throw error
  } finally {
    span.end()
  }
}

/** What the event's attempt row records of a forward's answer. */
export function attemptFacts(result: ForwardResult): HandlerResult {
  return { responseStatus: result.status, responseExcerpt: result.excerpt }
}

/**
 * A forward's arguments: the event and the hash of its bytes (see ForwardArgs). The hash is computed
 * when first read (the payload hash, the arguments a claim stores): a source's own forward, sent
 * outside the ledger, never reads it.
 */
export function forwardArgs(source: string, eventId: string, raw: Buffer): ForwardArgs {
  let bodySha256: string | undefined
  return {
    source,
    eventId,
    get bodySha256() {
      bodySha256 ??= createHash('sha256').update(raw).digest('hex')
      return bodySha256
    },
  }
}

export function describeOutcome(outcome: Exclude<ForwardOutcome, { kind: 'completed' }>): string {
  switch (outcome.kind) {
    case 'exhausted':
    case 'failed':
      return outcome.error
    case 'retry_later':
      return 'the forward is in progress in another worker; retrying later'
    case 'payload_conflict':
      return outcome.message
    case 'needs_reconciliation':
      return `the forward's outcome is unknown (${outcome.reason}); waiting for reconciliation`
    case 'awaiting_approval':
      return `the forward waits for a human decision (approval ${outcome.approvalId ?? 'pending'})`
    case 'abandoned':
      return 'the forward was abandoned by an operator'
    default:
      return outcome satisfies never
  }
}

export function detailsOf(outcome: ForwardOutcome): HandlerResult {
  const details = 'details' in outcome ? outcome.details : undefined
  if (typeof details !== 'object' || details === null) return {}
  const { status, excerpt } = details as Partial<ForwardResult>
  return {
    ...(typeof status === 'number' ? { responseStatus: status } : {}),
    ...(typeof excerpt === 'string' ? { responseExcerpt: excerpt } : {}),
  }
}
