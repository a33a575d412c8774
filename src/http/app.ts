import { Hono } from 'hono'
import { requestId } from 'hono/request-id'
import type { Config } from '../config/config.js'
import type { ClaimBatcher } from '../db/claims.js'
import type { Database } from '../db/client.js'
import type { Logger } from '../logger.js'
import type { Metrics } from '../metrics.js'
import type { Enqueuer } from '../queue/enqueuer.js'
import { errorBody, handleError } from './errors.js'
import { healthRoutes, type ReadinessCheck } from './routes/health.js'
import { webhookRoutes } from './routes/webhooks.js'

export interface AppDependencies {
  config: Config
  db: Database
  claims: ClaimBatcher
  enqueuer: Enqueuer
  logger: Logger
  metrics: Metrics
  readiness: readonly ReadinessCheck[]
}

/** The HTTP app, built from its dependencies only, so tests pass a real database and their own queue. */
export function createApp(deps: AppDependencies) {
  return (
    new Hono()
      // Echoes a caller's X-Request-Id (or makes one) so a provider's delivery log and ours line up.
      .use(requestId())
      .route('/', healthRoutes(deps.readiness))
      .route('/', metricsRoute(deps.metrics))
      .route('/webhooks', webhookRoutes(deps))
      .notFound((c) => c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}`), 404))
      .onError(handleError(deps.logger))
  )
}

/** `GET /metrics` in Prometheus's text format. */
function metricsRoute(metrics: Metrics) {
  return new Hono().get('/metrics', async (c) =>
    c.body(await metrics.registry.metrics(), 200, { 'Content-Type': metrics.registry.contentType }),
  )
}

/** The app of a worker-only process: health, readiness and metrics, nothing that receives. */
export function createHealthApp(readiness: readonly ReadinessCheck[], metrics: Metrics, logger: Logger) {
  return new Hono()
    .route('/', healthRoutes(readiness))
    .route('/', metricsRoute(metrics))
    .notFound((c) => c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}`), 404))
    .onError(handleError(logger))
}
