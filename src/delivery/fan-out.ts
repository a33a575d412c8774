import type { RouteConfig } from '../config/routes.js'
import type { Database } from '../db/client.js'
import {
  lockEventRoute,
  markEventRouteDone,
  type RouteOutcome,
  readRouteStates,
  recordRouteOutcomes,
} from '../db/event-routes.js'
import type { Failpoints } from '../failpoints.js'
import { type EventHandler, type EventInvoker, eventRunOf } from '../outbound/event-handler.js'
import {
  type EventContext,
  HandlerError,
  type HandlerResult,
  RetryLaterError,
  type SourceHandler,
} from '../queue/handler.js'
import { deliverForward, type ForwardDeliveryDependencies, type ForwardRoute } from './deliver-forward.js'
import type { DisabledRoutes } from './disabled-routes.js'
import { compileFilter, type EventFilter } from './filter.js'
import { forwardTool } from './forward.js'
import type { Destination } from './guard.js'
import { type OrderingSettings, orderedScope } from './ordering.js'

/** What a source's forward and routes run with in a worker process (control.ts makes them). */
export interface FanOutDependencies extends ForwardDeliveryDependencies {
  db: Database
  /**
   * The outbound ledger: `ctx.invoke` of handlers in code and every forward's operation, keyed
   * `<source>:<event id>:route:<route id>[:<step>]` for routes.
   */
  invoker: EventInvoker
  /** Every configured forward's destination, by id (`<source>/<route id>`). */
  destinations: ReadonlyMap<string, Destination>
  /** What a source's own forward knows of the disabled routes (its routes read theirs per event). */
  disabledRoutes: DisabledRoutes
  /** How long a delivery to a disabled route waits before it looks again. */
  pausedRecheckMs: number
  /** How soon a delivery held back by its ordering key looks again. */
  ordering: OrderingSettings
  /** Crash tests' points (src/failpoints.ts): a source's own forward dies before it sends. */
  failpoints: Failpoints
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

type RouteContext = EventContext & { disabledReason: string | undefined }

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
    const forward: ForwardRoute = {
      id: route.id,
      destination: destinationFor(deps, source, route.id),
      idempotencyKey: (context) => `${context.source}:${context.eventId}:${route.id}`,
      spanRouteId: route.id,
    }
    return (context) => runForward(deps, forward, context)
  }
  const handler = route.handler === undefined ? undefined : codeHandlers.get(route.handler)
  if (handler === undefined) {
    throw new TypeError(`route '${route.id}': handler '${route.handler}' is not registered`)
  }
  return (context) => runCode(deps, route.id, handler, context)
}

/** The destination of a source's forward route, made once for the process (control.ts). */
export function destinationFor(deps: FanOutDependencies, source: string, routeId: string): Destination {
  const destination = deps.destinations.get(`${source}/${routeId}`)
  if (destination === undefined) throw new TypeError(`route '${source}/${routeId}' has no destination`)
  return destination
}

async function runForward(
  deps: FanOutDependencies,
  route: ForwardRoute,
  context: RouteContext,
): Promise<RouteOutcome | RouteWait> {
  const routeId = route.id
  if (context.disabledReason !== undefined) {
    return {
      routeId,
      status: 'paused',
      retryAfterMs: deps.pausedRecheckMs,
      reason: `route '${routeId}' is disabled (${context.disabledReason}); re-enable it to deliver`,
    }
  }
  const invoke = deps.invoker({ ...eventRunOf(context), scope: ['route'] })
  const delivered = await deliverForward(deps, route, context, (delivery, args) =>
    invoke(forwardTool(route.destination, delivery), routeId, args),
  )
  switch (delivered.kind) {
    case 'done':
      return { routeId, status: 'done', ran: true, responseStatus: delivered.result.status }
    case 'wait':
      return { routeId, status: 'waiting', retryAfterMs: delivered.retryAfterMs, reason: delivered.reason }
    case 'paused':
      return {
        routeId,
        status: 'paused',
        retryAfterMs: deps.pausedRecheckMs,
        reason: `route '${routeId}': ${delivered.reason}`,
      }
    case 'failed':
      return {
        routeId,
        status: 'failed',
        ran: true,
        error: delivered.error,
        responseStatus: delivered.details.responseStatus,
      }
    default:
      return delivered satisfies never
  }
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
      invoke: deps.invoker({ ...eventRunOf(context), scope: ['route', routeId] }),
    })
    await markEventRouteDone(tx, context.eventRowId, routeId, result?.responseStatus ?? undefined)
    return { routeId, status: 'done', ran: true, responseStatus: result?.responseStatus }
  })
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
