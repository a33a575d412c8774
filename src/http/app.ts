import type { Queue } from 'bullmq'
import { Hono } from 'hono'
import { requestId } from 'hono/request-id'
import { agentTokensOf } from '../config/agents.js'
import type { Config } from '../config/config.js'
import type { ClaimBatcher } from '../db/claims.js'
import type { Database } from '../db/client.js'
import type { CircuitView } from '../delivery/guard.js'
import { type Backpressure, noBackpressure } from '../inbound/backpressure.js'
import type { Logger } from '../logger.js'
import type { Metrics } from '../metrics.js'
import { agentProtocol } from '../outbound/agent.js'
import { createOutboundLedger, type OutboundLedger } from '../outbound/ledger.js'
import type { Enqueuer } from '../queue/enqueuer.js'
import type { HereLease } from '../queue/worker.js'
import type { Tracing } from '../tracing.js'
import { adminUi } from './admin-ui/routes.js'
import { errorBody, handleError } from './errors.js'
import { bearerAuth } from './middleware/bearer.js'
import { adminRoutes } from './routes/admin.js'
import { healthRoutes, type ReadinessCheck } from './routes/health.js'
import { operationRoutes } from './routes/operations.js'
import { webhookRoutes } from './routes/webhooks.js'

export interface AppDependencies {
  config: Config
  db: Database
  claims: ClaimBatcher
  /** Refuses new work with 429 when the ledger cannot keep up; absent, nothing is refused. */
  backpressure?: Backpressure
  enqueuer: Enqueuer
  /** This process's worker's place for a row it claims (Worker.reserveHere); absent: none. */
  reserveHere?: (() => HereLease | undefined) | undefined
  logger: Logger
  metrics: Metrics
  readiness: readonly ReadinessCheck[]
  /** Backs `/v1/operations`; defaults to one on `db` whose reconciliation the sweep schedules. */
  outbound?: OutboundLedger
  /** Unset: `/admin/api` refuses every request and the `/admin` page answers 404. */
  adminToken?: string | undefined
  /** The BullMQ queues `/admin/queues` shows; absent (in-process queue), that page says it needs Redis. */
  dashboardQueues?: readonly Queue[] | undefined
  /**
   * AGENT_TOKEN: a token of `/v1/operations` with the whole agents' space; the config's
   * `agents.tokens` add named, scoped ones. Neither: `/v1/operations` refuses every request.
   */
  agentToken?: string | undefined
  /** A route destination's circuit, for `/admin/routes`. */
  circuit?: ((destinationId: string) => Promise<CircuitView>) | undefined
  /** Set: `/metrics` wants it as a bearer token. Unset: `/metrics` is open (keep it off the internet). */
  metricsToken?: string | undefined
  /** OpenTelemetry (src/tracing.ts); absent: off. */
  tracing?: Tracing | undefined
}

/** The HTTP app, built from its dependencies only, so tests pass a real database and their own queue. */
export function createApp(deps: AppDependencies) {
  const outbound =
    deps.outbound ??
    createOutboundLedger({ db: deps.db, logger: deps.logger, settings: deps.config.file.outbound })
  return (
    new Hono()
      // Echoes a caller's X-Request-Id (or makes one) so a provider's delivery log and ours line up.
      .use(requestId())
      .route('/', healthRoutes(deps.readiness, deps.logger))
      .route('/', metricsRoute(deps.metrics, deps.metricsToken))
      .route('/webhooks', webhookRoutes(deps))
      .route(
        '/v1/operations',
        operationRoutes({
          db: deps.db,
          protocol: agentProtocol(outbound),
          agentTokens: agentTokensOf(deps.agentToken, deps.config.agentTokens),
          backpressure: deps.backpressure ?? noBackpressure,
          bodyLimitBytes: deps.config.file.server.operationsBodyLimitBytes,
          tracing: deps.tracing,
        }),
      )
      .route(
        '/admin/api',
        adminRoutes({
          db: deps.db,
          adminToken: deps.adminToken,
          enqueuer: deps.enqueuer,
          logger: deps.logger,
        }),
      )
      .route(
        '/admin',
        adminUi({
          db: deps.db,
          enqueuer: deps.enqueuer,
          logger: deps.logger,
          adminToken: deps.adminToken,
          sources: [...deps.config.sources.keys()],
          config: deps.config,
          circuit: deps.circuit,
          queues: deps.dashboardQueues,
        }),
      )
      .notFound((c) => c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}`), 404))
      .onError(handleError(deps.logger))
  )
}

/** `GET /metrics` in Prometheus's text format, behind METRICS_TOKEN when one is set. */
function metricsRoute(metrics: Metrics, token: string | undefined) {
  const route = new Hono()
  if (token !== undefined) route.use('/metrics', bearerAuth(token, 'metrics endpoint', 'METRICS_TOKEN'))
  return route.get('/metrics', async (c) =>
    c.body(await metrics.scrape(), 200, { 'Content-Type': metrics.registry.contentType }),
  )
}

/** The app of a worker-only process: health, readiness and metrics, nothing that receives. */
export function createHealthApp(
  readiness: readonly ReadinessCheck[],
  metrics: Metrics,
  logger: Logger,
  metricsToken?: string,
) {
  return new Hono()
    .route('/', healthRoutes(readiness, logger))
    .route('/', metricsRoute(metrics, metricsToken))
    .notFound((c) => c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}`), 404))
    .onError(handleError(logger))
}
