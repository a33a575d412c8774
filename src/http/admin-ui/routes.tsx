import type { Queue } from 'bullmq'
import { type Env, Hono, type MiddlewareHandler } from 'hono'
import type { Config } from '../../config/config.js'
import type { Database } from '../../db/client.js'
import type { CircuitView } from '../../delivery/guard.js'
import type { Logger } from '../../logger.js'
import type { Enqueuer } from '../../queue/enqueuer.js'
import { limitBody } from '../middleware/body-limit.js'
import { approvalRoutes } from './approval-routes.js'
import { deliveryRoutes } from './delivery-routes.js'
import { eventRoutes } from './event-routes.js'
import {
  type AdminEnv,
  adminOff,
  pageHeaders,
  readForm,
  requireCsrfToken,
  requireSession,
  safeNext,
  sameOriginWrites,
} from './guard.js'
import { Layout } from './layout.js'
import { LoginPage } from './login.js'
import { loginClient, loginThrottle } from './login-throttle.js'
import { overviewRoutes } from './overview-routes.js'
import { queueDashboard } from './queues.js'
import { adminSessions, operatorName } from './session.js'

const FORM_LIMIT_BYTES = 256 * 1024

export interface AdminUiDependencies {
  db: Database
  enqueuer: Enqueuer
  logger: Logger
  /** Unset: every page answers 404. */
  adminToken: string | undefined
  /** The configured source ids, offered in the events filter. */
  sources: readonly string[]
  /** The sources' routes, shown at /admin/routes. */
  config: Config
  /** A route destination's circuit breaker; absent in a process that guards none. */
  circuit?: ((destinationId: string) => Promise<CircuitView>) | undefined
  /** Shown at /admin/queues; absent with the in-process queue. */
  queues?: readonly Queue[] | undefined
}

/**
 * The admin page, mounted at `/admin`: server-rendered HTML and plain forms, no JavaScript.
 * `/admin/api` (bearer, for scripts) is a separate app and passes through untouched.
 */
export function adminUi(deps: AdminUiDependencies) {
  const app = new Hono<AdminEnv>()
  if (deps.adminToken === undefined) return app.use('*', skipApi(adminOff()))
  const sessions = adminSessions(deps.adminToken, deps.db)
  const throttle = loginThrottle()
  app.use('*', skipApi(pageHeaders()))
  app.use('*', skipApi(sameOriginWrites()))
  // Forms are small; the login form is parsed before anyone is known, so it must not take megabytes.
  app.use('*', skipApi(limitBody(FORM_LIMIT_BYTES, 'the admin page')))

  app
    .get('/login', async (c) => {
      if ((await sessions.read(c)) !== undefined) return c.redirect(safeNext(c.req.query('next')), 303)
      return c.html(<LoginPage next={safeNext(c.req.query('next'))} />)
    })
    .post('/login', async (c) => {
      const form = await readForm(c)
      const next = safeNext(form.next)
      const name = operatorName.safeParse(form.name ?? '')
      if (!name.success) {
        return c.html(<LoginPage next={next} error={name.error.issues[0]?.message} />, 400)
      }
      const client = loginClient(c)
      const wait = throttle.retryAfterSeconds(client)
      if (wait !== undefined) {
        deps.logger.warn({ name: name.data, client }, 'admin login refused: too many failed logins')
        const error = `Too many failed logins from your address: try again in ${Math.ceil(wait / 60)} minutes.`
        return c.html(<LoginPage next={next} name={name.data} error={error} />, 429, {
          'Retry-After': String(wait),
        })
      }
      if (!sessions.tokenMatches(form.token ?? '')) {
        throttle.recordFailure(client)
        deps.logger.warn({ name: name.data, client }, 'admin login refused: wrong token')
        return c.html(<LoginPage next={next} name={name.data} error="That is not the admin token." />, 401)
      }
      throttle.recordSuccess(client)
      await sessions.start(c, name.data)
      deps.logger.info({ name: name.data }, 'admin logged in')
      return c.redirect(next, 303)
    })
    .use('*', skipApi(requireSession(sessions)))
    .post('/logout', requireCsrfToken(sessions), async (c) => {
      if (c.get('form').everywhere === 'yes') {
        await sessions.endEverywhere(c)
        deps.logger.info({ name: c.get('session').name }, 'admin logged out every session')
      } else {
        await sessions.end(c, c.get('session'))
      }
      return c.redirect('/admin/login', 303)
    })
    .route('/', overviewRoutes({ db: deps.db, sources: deps.sources }))
    .route('/events', eventRoutes({ ...deps, sessions }))
    .route('/', approvalRoutes({ db: deps.db, sessions }))
    .route(
      '/routes',
      deliveryRoutes({
        db: deps.db,
        config: deps.config,
        circuit: deps.circuit,
        logger: deps.logger,
        sessions,
      }),
    )

  const dashboard = queueDashboard(deps.queues)
  if (dashboard === undefined) {
    app.all('/queues/*', (c) =>
      c.html(
        <Layout title="Queues" user={{ name: c.get('session').name, csrf: c.get('csrf') }} section="queues">
          <h1>Queues</h1>
          <p>
            The queue dashboard needs Redis: this process runs the in-process queue, which has no dashboard to
            show. Its events are on the <a href="/admin/events">Events</a> page.
          </p>
        </Layout>,
        404,
      ),
    )
  } else {
    app.route('/queues', dashboard)
  }
  return app
}

/**
 * The bearer API shares the /admin prefix and is its own app: its requests never meet the page's
 * session or redirects (its unknown paths fall through to the app's JSON 404).
 */
function skipApi<E extends Env>(middleware: MiddlewareHandler<E>): MiddlewareHandler<E> {
  return async (c, next) => {
    const path = c.req.path
    if (path === '/admin/api' || path.startsWith('/admin/api/')) return next()
    return middleware(c, next)
  }
}
