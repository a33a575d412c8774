import { type Config, ConfigError } from '../config/config.js'
import { type EvidenceIntake, withEvidence } from '../inbound/evidence.js'
import { type EventHandler, type EventInvoker, eventRunOf } from '../outbound/event-handler.js'
import type { SourceHandler } from '../queue/handler.js'
import { type FanOutDependencies, routesHandler } from './fan-out.js'
import { orderedHandler, orderedScope } from './ordering.js'
import { sourceForwardHandler } from './source-forward.js'

/** What the handlers run with in a worker process. */
export interface HandlerRuntime {
  fanOut: FanOutDependencies
  /** The evidence rules' step, for the sources that have rules (undefined: none has). */
  evidence: EvidenceIntake | undefined
}

/**
 * Each source's handler: one registered in code under the source's id, the config's `handler` (the
 * source's own forward, its one route), or its `routes` (whose code routes name handlers registered
 * in code), behind its ordering key and after its evidence rules' step. Every mismatch between the
 * config and the code is reported at once. Without `runtime` it only checks (at start-up, before any
 * connection is opened): forward and route sources then get a handler that refuses to run.
 */
export function resolveHandlers(
  config: Config,
  code: Readonly<Record<string, EventHandler>>,
  runtime: HandlerRuntime | undefined,
): Map<string, SourceHandler> {
  const fanOut = runtime?.fanOut
  const handlers = new Map<string, SourceHandler>()
  const problems: string[] = []
  const routeHandlerNames = new Set<string>()
  for (const source of config.sources.values()) {
    for (const route of source.config.routes ?? []) {
      if (route.handler === undefined) continue
      routeHandlerNames.add(route.handler)
      if (code[route.handler] === undefined) {
        problems.push(
          `source '${source.config.id}': route '${route.id}': handler '${route.handler}' is not registered in code`,
        )
      }
    }
  }
  for (const id of Object.keys(code)) {
    if (!config.sources.has(id) && !routeHandlerNames.has(id)) {
      problems.push(`handlers.${id}: no source or route handler with that name is configured`)
    }
  }
  for (const [id, source] of config.sources) {
    const fromCode = config.sources.has(id) && !routeHandlerNames.has(id) ? code[id] : undefined
    const { handler: fromConfig, routes } = source.config
    if (fromCode !== undefined && (fromConfig !== undefined || routes !== undefined)) {
      problems.push(
        `source '${id}': has ${routes === undefined ? 'a handler' : 'routes'} in the config file and a handler registered in code; keep one`,
      )
    } else if (fromCode !== undefined) {
      handlers.set(id, fanOut === undefined ? notStarted : codeHandler(fromCode, fanOut.invoker))
    } else if (fromConfig !== undefined) {
      handlers.set(id, fanOut === undefined ? notStarted : sourceForwardHandler(fanOut, id))
    } else if (routes !== undefined) {
      const named = new Map(
        routes.flatMap((route) => {
          const handler = route.handler === undefined ? undefined : code[route.handler]
          return route.handler === undefined || handler === undefined
            ? []
            : [[route.handler, handler] as const]
        }),
      )
      handlers.set(id, fanOut === undefined ? notStarted : routesHandler(fanOut, id, routes, named))
    } else if (source.config.evidence !== undefined) {
      // A source that only settles operations (a payment provider's events): its evidence step
      // (withEvidence, below) is all its events need, so they are DONE once it ran.
      handlers.set(id, { kind: 'direct', run: async () => ({}) })
    } else {
      problems.push(
        `source '${id}': handler: none configured (add "handler", "routes" or "evidence" to the source, or register one in code)`,
      )
    }
  }
  if (runtime !== undefined) {
    for (const [id, handler] of handlers) {
      const { orderingKey, evidence } = config.sources.get(id)?.config ?? {}
      let wrapped = handler
      if (orderingKey !== undefined) {
        const scope = orderedScope(runtime.fanOut.sql, runtime.fanOut.ordering, {
          source: id,
          pointer: orderingKey,
        })
        wrapped = orderedHandler(wrapped, scope)
      }
      // Outermost: the evidence step runs first, before an ordering key holds the event back.
      if (runtime.evidence !== undefined && evidence !== undefined && evidence.length > 0) {
        wrapped = withEvidence(wrapped, runtime.evidence)
      }
      handlers.set(id, wrapped)
    }
  }
  if (problems.length > 0)
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  return handlers
}

/** A handler registered in code: run in the transaction that marks DONE, with `ctx.invoke` under the event's key. */
export function codeHandler(handler: EventHandler, invoker: EventInvoker): SourceHandler {
  return {
    kind: 'transactional',
    run: (context) => handler({ ...context, invoke: invoker(eventRunOf(context)) }),
  }
}

const notStarted: SourceHandler = {
  kind: 'direct',
  run: async () => {
    throw new Error('deliveries are not started in this process')
  },
}
