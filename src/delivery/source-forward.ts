import type { SourceConfig } from '../config/config.js'
import type { RouteConfig } from '../config/routes.js'
import { SOURCE_FORWARD_ROUTE } from '../db/event-routes.js'
import { HandlerError, RetryLaterError, type SourceHandler } from '../queue/handler.js'
import { deliverForward, type ForwardRoute } from './deliver-forward.js'
import { destinationFor, type FanOutDependencies } from './fan-out.js'
import { attemptFacts, forwardOnce } from './forward.js'

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
 * any route. It is sent outside the outbound ledger (forwardOnce): with one destination, the event's
 * row is all the ledger such a forward needs. The worker's lease on the row keeps other workers off
 * it, the row's attempts bound the sends, each attempt's row records what the destination answered,
 * and DONE records the success, so a forward costs no operation, attempt or audit rows of its own.
 * A crash after the destination's 2xx and before DONE commits sends once more, with the same
 * `Idempotency-Key: <source>:<event id>`, as the ledger's idempotent forward did (its success and
 * DONE were one statement too). Operations of this forward written by earlier versions are left as
 * they are: the event's row decides.
 */
export function sourceForwardHandler(deps: FanOutDependencies, source: string): SourceHandler {
  const route: ForwardRoute = {
    id: SOURCE_FORWARD_ROUTE,
    destination: destinationFor(deps, source, SOURCE_FORWARD_ROUTE),
    idempotencyKey: () => undefined,
    spanRouteId: undefined,
  }
  return {
    kind: 'direct',
    async run(context, releaseSlot) {
      const disabled = await deps.disabledRoutes.reason(source, route.id)
      if (disabled !== undefined) {
        throw new RetryLaterError(
          `the forward of source '${source}' is disabled (${disabled}); re-enable it to deliver`,
          deps.pausedRecheckMs,
        )
      }
      const delivered = await deliverForward(deps, route, context, (delivery, args) => {
        // Crash test: the lease is committed, nothing is sent yet.
        deps.failpoints.hit('forward.before_send')
        return forwardOnce(route.destination, delivery, args, context.attempt)
      })
      switch (delivered.kind) {
        case 'done':
          releaseSlot()
          return attemptFacts(delivered.result)
        case 'wait':
          throw new RetryLaterError(delivered.reason, delivered.retryAfterMs)
        case 'paused':
          deps.disabledRoutes.disabled(source, route.id, delivered.reason)
          // The send that was answered 410 is recorded on the event (a route's on its operation).
          throw new RetryLaterError(
            `the forward of source '${source}': ${delivered.reason}`,
            deps.pausedRecheckMs,
            false,
            delivered.details,
          )
        case 'failed':
          throw new HandlerError(delivered.error, delivered.details)
        default:
          return delivered satisfies never
      }
    },
  }
}
