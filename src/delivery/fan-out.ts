import type postgres from 'postgres'
import type { RouteConfig, RouteForward } from '../config/routes.js'
import type { Database } from '../db/client.js'
import {
  disableRoute,
  lockEventRoute,
  markEventRouteDone,
  type RouteOutcome,
  readRouteStates,
  recordRouteOutcomes,
} from '../db/event-routes.js'
import {
  describeOutcome,
  detailsOf,
  type ForwardResult,
  forwardArgs,
  forwardTool,
  tracedForward,
} from '../handlers/forward.js'
import {
  type DirectContext,
  type EventHandler,
  type EventInvoker,
  HandlerError,
  type HandlerResult,
  RetryLaterError,
  type SourceHandler,
} from '../handlers/types.js'
import type { InvokeOutcome } from '../outbound/outcomes.js'
import { traceIdIn } from '../tracing.js'
import { compileFilter, type EventFilter } from './filter.js'
import type { DeliveryVerdict, Destination, DestinationGuard } from './guard.js'
import { type OrderingSettings, orderedScope } from './ordering.js'

export interface FanOutDependencies {
  db: Database
  sql: postgres.Sql
  guard: DestinationGuard
  /** The outbound ledger, keyed `<source>:<event id>:route:<route id>[:<step>]` for routes. */
  invoker: EventInvoker
  /** How long a delivery to a disabled route waits before it looks again. */
  pausedRecheckMs: number
  /** How soon a delivery held back by its ordering key looks again. */
  ordering: OrderingSettings
  /** A 410 Gone just disabled this route (called once, by the worker that disabled it). */
  onRouteDisabled?: (source: string, routeId: string, reason: string) => void
}

interface CompiledRoute {
  id: string
  matches: EventFilter
  run: (context: RouteContext) => Promise<RouteOutcome | RouteWait>
  /** The route's delivery of this event is recorded done (an ordering key hands off its line). */
  done?: (eventRowId: string) => Promise<void>
}

/** A route that could not run now: it goes back to the queue without using up an attempt. */
interface RouteWait {
  routeId: string
  status: 'waiting' | 'paused'
  retryAfterMs: number
  reason: string
  /** Logged at debug (an ordering wait, summed up per key elsewhere). */
  quiet?: boolean
}

type RouteContext = DirectContext & { disabledReason: string | undefined }

/**
 * A source's routes as the worker runs them: each route the event matches is its own delivery, a
 * forward through the outbound ledger under `<source>:<event id>:route:<route id>`, or a code handler
 * in its own transaction. Routes done in an earlier attempt or round are not run again; the event is
 * DONE when every matched route is, and an event that matches none is DONE with "no route matched".
 */
export function routesHandler(
  deps: FanOutDependencies,
  source: string,
  routes: readonly RouteConfig[],
  codeHandlers: ReadonlyMap<string, EventHandler>,
): SourceHandler {
  const compiled = routes.map((route) => compileRoute(deps, source, route, codeHandlers))
  return {
    kind: 'direct',
    // Every ordered route's line, once the event is DONE: those it did not match too. Until it was
    // looked at, it stood in their lines (it might have matched), and an event behind it waited.
    done: async (eventRowId) => {
      await Promise.all(compiled.map((route) => route.done?.(eventRowId)))
    },
    async run(context) {
      const matched = compiled.filter((route) =>
        route.matches({ eventType: context.eventType, event: context.event }),
      )
      if (matched.length === 0) return { responseExcerpt: NO_ROUTE }
      const states = await readRouteStates(deps.sql, context.eventRowId, source)
      const pending = matched.filter((route) => !states.done.has(route.id))
      const results = await Promise.all(
        pending.map((route) =>
          route.run({ ...context, disabledReason: states.disabled.get(route.id) }).catch(
            (error: unknown): RouteOutcome => ({
              routeId: route.id,
              status: 'failed',
              ran: true,
              error: error instanceof Error ? error.message : String(error),
              ...(error instanceof HandlerError ? { responseStatus: error.details.responseStatus } : {}),
            }),
          ),
        ),
      )
      await recordRouteOutcomes(deps.sql, context.eventRowId, results.map(asOutcome))
      await Promise.all(
        pending.map((route, index) =>
          results[index]?.status === 'done' ? route.done?.(context.eventRowId) : undefined,
        ),
      )
      return settle(matched, results)
    },
  }
}

/** What the attempt's record says when the event matched no route. */
export const NO_ROUTE = 'no route matched'

function compileRoute(
  deps: FanOutDependencies,
  source: string,
  route: RouteConfig,
  codeHandlers: ReadonlyMap<string, EventHandler>,
): CompiledRoute {
  const matches = compileFilter(route.filter)
  const run = routeRunner(deps, source, route, codeHandlers)
  if (route.orderingKey === undefined) return { id: route.id, matches, run }
  const scope = orderedScope(deps.sql, deps.ordering, {
    source,
    routeId: route.id,
    pointer: route.orderingKey,
  })
  return {
    id: route.id,
    matches,
    run: async (context) => {
      try {
        await scope.wait(context)
      } catch (error) {
        if (!(error instanceof RetryLaterError)) throw error
        return {
          routeId: route.id,
          status: 'waiting',
          retryAfterMs: error.retryAfterMs,
          reason: `route '${route.id}' ${error.message}`,
          quiet: error.quiet,
        }
      }
      return run(context)
    },
    done: (eventRowId) => scope.release(eventRowId),
  }
}

function routeRunner(
  deps: FanOutDependencies,
  source: string,
  route: RouteConfig,
  codeHandlers: ReadonlyMap<string, EventHandler>,
): CompiledRoute['run'] {
  if (route.forward !== undefined) {
    const forward = route.forward
    const destination: Destination = { id: `${source}/${route.id}`, limits: forward }
    return (context) => runForward(deps, route.id, forward, destination, context)
  }
  const handler = route.handler === undefined ? undefined : codeHandlers.get(route.handler)
  if (handler === undefined) {
    throw new TypeError(`route '${route.id}': handler '${route.handler}' is not registered`)
  }
  return (context) => runCode(deps, route.id, handler, context)
}

async function runForward(
  deps: FanOutDependencies,
  routeId: string,
  forward: RouteForward,
  destination: Destination,
  context: RouteContext,
): Promise<RouteOutcome | RouteWait> {
  if (context.disabledReason !== undefined) {
    return {
      routeId,
      status: 'paused',
      retryAfterMs: deps.pausedRecheckMs,
      reason: `route '${routeId}' is disabled (${context.disabledReason}); re-enable it to deliver`,
    }
  }
  const admission = await deps.guard.admit(destination)
  if (admission.kind === 'wait') {
    return { routeId, status: 'waiting', retryAfterMs: admission.retryAfterMs, reason: admission.reason }
  }
  let outcome: InvokeOutcome<ForwardResult> | undefined
  try {
    const invoke = deps.invoker({ ...runOf(context), scope: ['route'] })
    outcome = await tracedForward(context.trace, forward, routeId, (traceparent) =>
      invoke(
        forwardTool(forward, {
          raw: context.raw,
          headers: context.headers,
          signal: context.signal,
          rejectionsStayOpen: true,
          idempotencyKey: `${context.source}:${context.eventId}:${routeId}`,
          traceparent,
        }),
        routeId,
        forwardArgs(context.source, context.eventId, context.raw),
      ),
    )
  } finally {
    const details = outcome === undefined ? {} : detailsOf(outcome)
    const retryAfterMs =
      outcome !== undefined && 'details' in outcome ? retryAfterOf(outcome.details) : undefined
    await admission.settle(verdictOf(outcome, details), retryAfterMs)
  }
  if (outcome.kind === 'completed') {
    return { routeId, status: 'done', ran: true, responseStatus: outcome.result.status }
  }
  if (outcome.kind === 'retry_later') {
    return {
      routeId,
      status: 'waiting',
      retryAfterMs: outcome.retryAfterMs,
      reason: describeOutcome(outcome),
    }
  }
  const details = detailsOf(outcome)
  if (details.responseStatus === 410) {
    // Standard Webhooks: 410 Gone means "stop sending". Pause the route for a person, never fail it.
    const reason = `${forward.url} answered 410 Gone`
    if (await disableRoute(deps.sql, context.source, routeId, reason)) {
      context.logger.warn({ route: routeId }, `route disabled: ${reason}`)
      deps.onRouteDisabled?.(context.source, routeId, reason)
    }
    return {
      routeId,
      status: 'paused',
      retryAfterMs: deps.pausedRecheckMs,
      reason: `route '${routeId}': ${reason}`,
    }
  }
  return {
    routeId,
    status: 'failed',
    ran: true,
    error: describeOutcome(outcome),
    responseStatus: details.responseStatus,
  }
}

/** A failing send counts against the destination only when it says something about its health. */
function verdictOf(
  outcome: InvokeOutcome<ForwardResult> | undefined,
  details: HandlerResult,
): DeliveryVerdict {
  if (outcome === undefined) return { kind: 'failure' }
  switch (outcome.kind) {
    case 'completed':
      return outcome.replayed ? { kind: 'neutral' } : { kind: 'success' }
    case 'exhausted':
    case 'failed': {
      const status = details.responseStatus
      return status === undefined || status >= 500 ? { kind: 'failure' } : { kind: 'neutral' }
    }
    default:
      return { kind: 'neutral' }
  }
}

function retryAfterOf(details: unknown): number | undefined {
  if (typeof details !== 'object' || details === null) return undefined
  const value = (details as Partial<ForwardResult>).retryAfterMs
  return typeof value === 'number' ? value : undefined
}

/**
 * A code route runs in a transaction of its own that also marks it done, so its writes happen once
 * however the event's other routes fare; its `ctx.invoke` steps are keyed under the route.
 */
async function runCode(
  deps: FanOutDependencies,
  routeId: string,
  handler: EventHandler,
  context: RouteContext,
): Promise<RouteOutcome> {
  const { disabledReason: _, ...handlerContext } = context
  return deps.db.transaction(async (tx) => {
    if ((await lockEventRoute(tx, context.eventRowId, routeId)) === 'done') {
      return { routeId, status: 'done', ran: false }
    }
    const result = await handler({
      ...handlerContext,
      tx,
      invoke: deps.invoker({ ...runOf(context), scope: ['route', routeId] }),
    })
    await markEventRouteDone(tx, context.eventRowId, routeId, result?.responseStatus ?? undefined)
    return { routeId, status: 'done', ran: true, responseStatus: result?.responseStatus }
  })
}

function runOf(context: RouteContext) {
  return {
    source: context.source,
    eventId: context.eventId,
    runId: `${context.eventRowId}/${context.attempt}`,
    traceId: traceIdIn(context.trace),
  }
}

function asOutcome(result: RouteOutcome | RouteWait): RouteOutcome {
  if ('ran' in result) return result
  return { routeId: result.routeId, status: result.status, ran: false, error: result.reason }
}

/**
 * The event's verdict from its routes: DONE when all are done; a failed route fails the attempt
 * (the worker's backoff and attempt cap apply); routes that only wait put the event back without
 * using up an attempt, at the soonest time one of them may go.
 */
function settle(
  matched: readonly CompiledRoute[],
  results: readonly (RouteOutcome | RouteWait)[],
): HandlerResult {
  const failed = results.filter((r): r is RouteOutcome => 'ran' in r && r.status === 'failed')
  if (failed.length > 0) {
    const message = failed.map((r) => `route '${r.routeId}': ${r.error ?? 'failed'}`).join('; ')
    const only = failed.length === 1 ? failed[0] : undefined
    throw new HandlerError(
      message,
      only?.responseStatus === undefined ? {} : { responseStatus: only.responseStatus },
    )
  }
  const waits = results.filter((r): r is RouteWait => !('ran' in r))
  if (waits.length > 0) {
    const soonest = Math.min(...waits.map((w) => w.retryAfterMs))
    throw new RetryLaterError(
      waits.map((w) => w.reason).join('; '),
      soonest,
      waits.every((w) => w.quiet === true),
    )
  }
  return { responseExcerpt: `delivered to ${matched.map((route) => `'${route.id}'`).join(', ')}` }
}
