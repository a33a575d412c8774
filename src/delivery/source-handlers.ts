import { type Config, ConfigError } from '../config/config.js'
import { forwardDelivery, forwardToolTimeoutMs } from '../handlers/forward.js'
import type { EventHandler, SourceHandler } from '../handlers/types.js'
import { toolLeaseMs } from '../outbound/machine.js'
import { type FanOutDependencies, routesHandler } from './fan-out.js'
import { orderedHandler, orderedScope } from './ordering.js'

/**
 * Each source's handler: one registered in code under the source's id, the config's `handler`, or
 * its `routes` (whose code routes name handlers registered in code). Every mismatch between the
 * config and the code is reported at once. Without `fanOut` it only checks (at start-up, before any
 * connection is opened): route sources then get a handler that refuses to run.
 */
export function resolveHandlers(
  config: Config,
  code: Readonly<Record<string, EventHandler>>,
  fanOut: FanOutDependencies | undefined,
): Map<string, SourceHandler> {
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
      handlers.set(id, { kind: 'transactional', run: fromCode })
    } else if (fromConfig !== undefined) {
      handlers.set(id, {
        kind: 'direct',
        run: forwardDelivery(fromConfig),
        forwardLeaseMs: toolLeaseMs(config.file.outbound, { timeoutMs: forwardToolTimeoutMs(fromConfig) }),
      })
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
      // A source that only settles operations (a payment provider's events): the worker's evidence
      // step is all its events need, so they are DONE once it ran.
      handlers.set(id, { kind: 'direct', run: async () => ({}) })
    } else {
      problems.push(
        `source '${id}': handler: none configured (add "handler", "routes" or "evidence" to the source, or register one in code)`,
      )
    }
  }
  if (fanOut !== undefined) {
    for (const [id, handler] of handlers) {
      const pointer = config.sources.get(id)?.config.orderingKey
      if (pointer !== undefined) {
        const scope = orderedScope(fanOut.sql, fanOut.ordering, { source: id, pointer })
        handlers.set(id, orderedHandler(handler, scope))
      }
    }
  }
  if (problems.length > 0)
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  return handlers
}

const notStarted: SourceHandler = {
  kind: 'direct',
  run: async () => {
    throw new Error('routes are not started in this process')
  },
}
