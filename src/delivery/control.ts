import type { Config } from '../config/config.js'
import type { LedgerView } from '../db/client.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import { addGauge, type Metrics } from '../metrics.js'
import type { EventInvoker } from '../outbound/event-handler.js'
import type { JobQueue } from '../queue/backend.js'
import { guardConnection, type OnReconnect } from '../queue/connections.js'
import { type ProcessEventData, processEventLaterJob } from '../queue/jobs.js'
import { disabledRoutesView } from './disabled-routes.js'
import type { FanOutDependencies } from './fan-out.js'
import { forwardDestination } from './forward.js'
import type { CircuitView, Destination, DestinationGuard, GuardEvents } from './guard.js'
import { createMemoryGuard } from './memory-guard.js'
import { createRedisGuard } from './redis-guard.js'
import { deliveryRoutesOf } from './source-forward.js'

export interface DeliveryControl {
  /** What the worker's forward and route handlers need. */
  fanOut: FanOutDependencies
  /** Every forward destination (each route's, each source's own), for /metrics, alerts and the admin page. */
  destinations: readonly Destination[]
  circuit(destinationId: string): Promise<CircuitView>
  close(): Promise<void>
}

/**
 * The guard over every forward destination (Redis when the queue is BullMQ, so every worker process
 * shares the limits; memory with the in-process queue, where one process runs everything), and
 * each destination's circuit on /metrics.
 */
export function startDeliveryControl(deps: {
  config: Config
  redisUrl: string | undefined
  queuePrefix: string
  ledger: LedgerView
  logger: Logger
  metrics: Metrics
  invoker: EventInvoker
  /** Where an ordering key's hand-off adds the next event's job, when it is not run at once. */
  queue: JobQueue<ProcessEventData>
  /** Runs an event now in this process's worker; false when there is none (yet). */
  runNow?: (eventRowId: string) => boolean
  events?: GuardEvents & Pick<FanOutDependencies, 'onRouteDisabled'>
  failpoints: Failpoints
}): DeliveryControl {
  const { config, logger } = deps
  const guard: DestinationGuard =
    deps.redisUrl === undefined
      ? createMemoryGuard(logger, deps.events)
      : createRedisGuard(
          quietConnection(deps.redisUrl, () => deps.metrics.redisReconnects.inc({ connection: 'guard' })),
          deps.queuePrefix,
          logger,
          deps.events,
        )
  const destinations = [...config.sources.values()].flatMap((source) =>
    deliveryRoutesOf(source.config).flatMap((route) =>
      route.forward === undefined
        ? []
        : [forwardDestination(`${source.config.id}/${route.id}`, route.forward)],
    ),
  )
  const circuitGauges = [
    {
      name: 'hookledger_destination_circuit_open',
      help: 'Whether the circuit breaker of a forward destination is open (1, also half-open) or closed (0)',
      value: (view: CircuitView) => (view.state === 'closed' ? 0 : 1),
    },
    {
      name: 'hookledger_destination_consecutive_failures',
      help: 'Consecutive failed deliveries (timeouts, 5xx, connection errors) to a forward destination',
      value: (view: CircuitView) => view.failures,
    },
  ]
  for (const gauge of destinations.length > 0 ? circuitGauges : []) {
    addGauge(deps.metrics, {
      name: gauge.name,
      help: gauge.help,
      labelNames: ['destination'],
      read: () =>
        Promise.all(
          destinations.map(async ({ id }) => ({
            labels: { destination: id },
            value: gauge.value(await guard.circuit(id)),
          })),
        ),
    })
  }
  return {
    fanOut: {
      db: deps.ledger.db,
      sql: deps.ledger.sql,
      guard,
      invoker: deps.invoker,
      failpoints: deps.failpoints,
      destinations: new Map(destinations.map((destination) => [destination.id, destination])),
      disabledRoutes: disabledRoutesView(deps.ledger.db),
      pausedRecheckMs: config.file.delivery.pausedRecheckMs,
      ordering: {
        recheckMs: config.file.delivery.orderingRecheckMs,
        failedHeadRecheckMs: config.file.delivery.pausedRecheckMs,
        // At once in this worker (a round through Redis cost ~25 ms per event of a busy key), or
        // a job of its own under a fresh id. Either way the event's waiting job stays as the
        // fallback, and whichever runs second finds the row DONE (one lease query) or leased.
        handOff: async (eventRowId, delayMs) => {
          if (delayMs === 0 && deps.runNow?.(eventRowId) === true) return
          const job = processEventLaterJob(eventRowId, delayMs)
          await deps.queue.add(job.name, job.data, job.opts)
        },
        logger,
      },
      onRouteDisabled: deps.events?.onRouteDisabled,
    },
    destinations,
    circuit: (id) => guard.circuit(id),
    close: () => guard.close(),
  }
}

function quietConnection(url: string, onReconnect: OnReconnect) {
  const connection = guardConnection(url, onReconnect)
  // Reconnects are logged by the worker's own connection; an unhandled 'error' would end the process.
  connection.on('error', () => {})
  return connection
}
