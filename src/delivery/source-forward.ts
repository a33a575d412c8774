import type { SourceConfig } from '../config/config.js'
import type { RouteConfig } from '../config/routes.js'
import { SOURCE_FORWARD_ROUTE } from '../db/event-routes.js'
import { eventRunOf } from '../outbound/event-handler.js'
import { HandlerError, RetryLaterError, type SourceHandler } from '../queue/handler.js'
import { deliverForward, type ForwardRoute } from './deliver-forward.js'
import { destinationFor, type FanOutDependencies } from './fan-out.js'
import { attemptFacts, FORWARD_STEP } from './forward.js'

/** The routes a source delivers through: its `routes`, or its own forward as its one route. */
export function deliveryRoutesOf(source: SourceConfig): readonly RouteConfig[] {
  if (source.routes !== undefined) return source.routes
  if (source.handler === undefined) return []
  const { type: _, ...forward } = source.handler
  return [{ id: SOURCE_FORWARD_ROUTE, forward }]
}

/**
 * A source's own forward as its one route: the event goes through its destination's guard (rate
 * limit, concurrency cap, circuit breaker), a 410 Gone disables the route, and alerts go out, as for
 * any route. What it keeps of the source forward it always was: the operation key
 * `<source>:<event id>:forward` and `Idempotency-Key: <source>:<event id>` (an operation claimed,
 * or a send made, before this version is met again, never made twice), the forward claimed with the
 * worker's lease (`forwardLeaseMs`), and its success marking the event DONE in the same statement.
 * The event's own attempts record its deliveries, so it keeps no route rows.
 */
export function sourceForwardHandler(
  deps: FanOutDependencies,
  source: string,
  forwardLeaseMs: number,
): SourceHandler {
  const route: ForwardRoute = {
    id: SOURCE_FORWARD_ROUTE,
    destination: destinationFor(deps, source, SOURCE_FORWARD_ROUTE),
    idempotencyKey: () => undefined,
    spanRouteId: undefined,
  }
  return {
    kind: 'direct',
    forwardLeaseMs,
    async run(context, attempt) {
      const disabled = await deps.disabledRoutes.reason(source, route.id)
      if (disabled !== undefined) {
        throw new RetryLaterError(
          `the forward of source '${source}' is disabled (${disabled}); re-enable it to deliver`,
          deps.pausedRecheckMs,
        )
      }
      // The event's last step: its success marks the event DONE with it, and it takes the lease's claim.
      const invoke = deps.invoker({ ...eventRunOf(context), attempt })
      const delivered = await deliverForward(deps, route, context, (tool, args) =>
        invoke(tool, FORWARD_STEP, args, { last: attemptFacts }),
      )
      switch (delivered.kind) {
        case 'done':
          return attemptFacts(delivered.result)
        case 'wait':
          throw new RetryLaterError(delivered.reason, delivered.retryAfterMs)
        case 'paused':
          deps.disabledRoutes.disabled(source, route.id, delivered.reason)
          throw new RetryLaterError(
            `the forward of source '${source}': ${delivered.reason}`,
            deps.pausedRecheckMs,
          )
        case 'failed':
          throw new HandlerError(delivered.error, delivered.details)
        default:
          return delivered satisfies never
      }
    },
  }
}
