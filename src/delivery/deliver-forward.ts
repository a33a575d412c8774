import type postgres from 'postgres'
import { disableRoute } from '../db/event-routes.js'
import type { EventContext, HandlerResult } from '../queue/handler.js'
import {
  type Delivery,
  describeOutcome,
  detailsOf,
  type ForwardArgs,
  type ForwardOutcome,
  type ForwardResult,
  forwardArgs,
  tracedForward,
} from './forward.js'
import type { DeliveryVerdict, Destination, DestinationGuard } from './guard.js'

export interface ForwardDeliveryDependencies {
  sql: postgres.Sql
  guard: DestinationGuard
  /** A 410 Gone just disabled this route (called once, by the worker that disabled it). */
  onRouteDisabled?: ((source: string, routeId: string, reason: string) => void) | undefined
}

/** One forward route of a source: a route's `forward`, or the source's own (`handler: forward`). */
export interface ForwardRoute {
  id: string
  destination: Destination
  /** `Idempotency-Key`; `<source>:<event id>` when undefined. */
  idempotencyKey: (context: EventContext) => string | undefined
  /** The route's id on the forward span (`hookledger.route`); a source's own forward has none. */
  spanRouteId: string | undefined
}

/**
 * Sends the delivery: through the outbound ledger under the route's operation key (a route's
 * forward), or once outside it, guarded by the event's own row (a source's own forward, forwardOnce).
 */
export type ForwardSend = (delivery: Delivery, args: ForwardArgs) => Promise<ForwardOutcome>

/** How one forward of an event to its route went. */
export type ForwardDelivery =
  | { kind: 'done'; result: ForwardResult }
  /** Held back (a destination limit, an open circuit, another worker's lease): no attempt used up. */
  | { kind: 'wait'; retryAfterMs: number; reason: string }
  /** The destination answered 410 Gone: the route is disabled until a person re-enables it. */
  | { kind: 'paused'; reason: string; details: HandlerResult }
  | { kind: 'failed'; error: string; details: HandlerResult }

/**
 * Sends an event to one forward route's destination, once its guard admits it: the rate limit, the
 * cap on deliveries in flight and the circuit breaker apply, and what the destination answered feeds
 * them back. Every answer but a 2xx leaves the delivery open to a later send, so a 410 Gone
 * disables the route (Standard Webhooks: stop sending) and its deliveries pause until a person
 * re-enables it; they are never failed for it.
 */
export async function deliverForward(
  deps: ForwardDeliveryDependencies,
  route: ForwardRoute,
  context: EventContext,
  send: ForwardSend,
): Promise<ForwardDelivery> {
  const { destination } = route
  const admission = await deps.guard.admit(destination)
  if (admission.kind === 'wait') {
    return { kind: 'wait', retryAfterMs: admission.retryAfterMs, reason: admission.reason }
  }
  // What the destination answered this time, for its guard: an invoke that sent nothing (a forward
  // completed before, another worker's lease, a round a crashed worker left exhausted) says nothing
  // about the destination's health.
  let sent: { answer: ForwardResult | undefined } | undefined
  let outcome: ForwardOutcome
  try {
    outcome = await tracedForward(context.trace, destination, route.spanRouteId, (traceparent) =>
      send(
        {
          raw: context.raw,
          headers: context.headers,
          signal: context.signal,
          rejectionsStayOpen: true,
          idempotencyKey: route.idempotencyKey(context),
          traceparent,
          answered: (answer) => {
            sent = { answer }
          },
        },
        forwardArgs(context.source, context.eventId, context.raw),
      ),
    )
  } finally {
    // Not awaited: once the destination answered, the attempt's outcome is what it answered. A store
    // slow to take the guard's bookkeeping (a Redis failing over) would otherwise hold the handler
    // past its deadline, and a forward the destination took would count as failed and go again.
    void admission.settle(verdictOf(sent), sent?.answer?.retryAfterMs)
  }
  if (outcome.kind === 'completed') return { kind: 'done', result: outcome.result }
  if (outcome.kind === 'retry_later') {
    // Not this event's failure: another worker's lease on the forward has to run out first.
    return { kind: 'wait', retryAfterMs: outcome.retryAfterMs, reason: describeOutcome(outcome) }
  }
  const details = detailsOf(outcome)
  if (details.responseStatus === 410) {
    const reason = `${destination.forward.url} answered 410 Gone`
    if (await disableRoute(deps.sql, context.source, route.id, reason)) {
      context.logger.warn({ route: route.id }, `route disabled: ${reason}`)
      deps.onRouteDisabled?.(context.source, route.id, reason)
    }
    return { kind: 'paused', reason, details }
  }
  return { kind: 'failed', error: describeOutcome(outcome), details }
}

/**
 * A send counts against its destination only when the answer says something about its health: a
 * timeout, a connection error or a 5xx. No send at all counts for nothing.
 */
function verdictOf(sent: { answer: ForwardResult | undefined } | undefined): DeliveryVerdict {
  if (sent === undefined) return { kind: 'neutral' }
  const status = sent.answer?.status
  if (status === undefined || status >= 500) return { kind: 'failure' }
  return status >= 200 && status < 300 ? { kind: 'success' } : { kind: 'neutral' }
}
