import { Hono } from 'hono'
import type { FC } from 'hono/jsx'
import type { Config } from '../../config/config.js'
import type { RouteConfig } from '../../config/routes.js'
import type { Database } from '../../db/client.js'
import { enableRoute, listDisabledRoutes, resumedText } from '../../db/event-routes.js'
import { unstorableText } from '../../db/text.js'
import type { CircuitView } from '../../delivery/guard.js'
import { deliveryRoutesOf } from '../../delivery/source-forward.js'
import type { Logger } from '../../logger.js'
import { type AdminEnv, requireCsrfToken } from './guard.js'
import { Badge, CsrfField, Layout, MessagePage, type PageProps, utc } from './layout.js'
import type { AdminSessions } from './session.js'
import { Table } from './tables.js'

export interface DeliveryRouteDependencies {
  db: Database
  config: Config
  /** A destination's circuit; absent where no process of this deployment guards destinations. */
  circuit?: ((destinationId: string) => Promise<CircuitView>) | undefined
  logger: Logger
  sessions: AdminSessions
}

interface RouteRow {
  source: string
  route: RouteConfig
  disabled: { reason: string; since: Date } | undefined
  circuit: CircuitView | undefined
}

/** `/admin/routes`: every source's routes, their destinations' circuits, and re-enabling a disabled one. */
export function deliveryRoutes(deps: DeliveryRouteDependencies) {
  return new Hono<AdminEnv>()
    .get('/', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const disabled = new Map(
        (await listDisabledRoutes(deps.db.$client)).map((row) => [
          `${row.source}/${row.routeId}`,
          { reason: row.reason, since: row.disabledAt },
        ]),
      )
      const rows: RouteRow[] = await Promise.all(
        [...deps.config.sources.values()].flatMap((source) =>
          deliveryRoutesOf(source.config).map(async (route) => {
            const id = `${source.config.id}/${route.id}`
            const circuit =
              route.forward === undefined || deps.circuit === undefined ? undefined : await deps.circuit(id)
            return { source: source.config.id, route, disabled: disabled.get(id), circuit }
          }),
        ),
      )
      const notice = c.req.query('enabled')
      const resumed = Number(c.req.query('resumed'))
      return c.html(
        <RoutesPage
          page={{
            title: 'Routes',
            user,
            section: 'routes',
            notice:
              notice === undefined
                ? undefined
                : {
                    kind: 'ok',
                    text: `${notice} enabled: ${Number.isSafeInteger(resumed) && resumed >= 0 ? resumedText(resumed) : 'its paused deliveries go out now'}.`,
                  },
          }}
          rows={rows}
        />,
      )
    })
    .post('/:source/:route/enable', requireCsrfToken(deps.sessions), async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const { source, route } = c.req.param()
      // Ids from the config file are plain text: what PostgreSQL cannot even compare names no route.
      if (unstorableText(source) !== undefined || unstorableText(route) !== undefined) {
        return c.html(
          <MessagePage
            props={{ title: 'No route has that name.', user, section: 'routes' }}
            back={{ href: '/admin/routes', label: '« Routes' }}
          />,
          400,
        )
      }
      const enabled = await enableRoute(deps.db.$client, source, route)
      if (enabled === undefined) {
        return c.html(
          <MessagePage
            props={{
              title: `Route ${source}/${route} is not disabled. Nothing changed.`,
              user,
              section: 'routes',
            }}
            back={{ href: '/admin/routes', label: '« Routes' }}
          />,
          409,
        )
      }
      deps.logger.info({ source, route, by: user.name, resumed: enabled.resumed }, 'route re-enabled')
      return c.redirect(
        `/admin/routes?enabled=${encodeURIComponent(`${source}/${route}`)}&resumed=${enabled.resumed}`,
        303,
      )
    })
}

const RoutesPage: FC<{
  page: PageProps & { user: { name: string; csrf: string } }
  rows: readonly RouteRow[]
}> = ({ page, rows }) => (
  <Layout {...page}>
    <h1>Routes</h1>
    <Table
      rows={rows}
      empty="No source has routes: each delivers through its one handler."
      columns={[
        { head: 'Route', class: 'mono', cell: (row) => `${row.source}/${row.route.id}` },
        { head: 'Filter', class: 'mono', cell: (row) => describeFilter(row.route) },
        {
          head: 'Destination',
          class: 'mono',
          style: 'overflow-wrap:anywhere',
          cell: (row) => row.route.forward?.url ?? `code handler '${row.route.handler}'`,
        },
        { head: 'Limits', cell: (row) => describeLimits(row.route) },
        { head: 'Circuit', cell: (row) => <CircuitState circuit={row.circuit} /> },
        {
          head: 'State',
          cell: (row) =>
            row.disabled === undefined ? (
              <Badge status="enabled" />
            ) : (
              <form method="post" action={`/admin/routes/${row.source}/${row.route.id}/enable`} class="row">
                <Badge status="disabled" />
                <span class="err">
                  {row.disabled.reason} (since {utc(row.disabled.since)})
                </span>
                <CsrfField token={page.user.csrf} />
                <button type="submit" class="ok">
                  Enable
                </button>
              </form>
            ),
        },
      ]}
    />
  </Layout>
)

const CircuitState: FC<{ circuit: CircuitView | undefined }> = ({ circuit }) =>
  circuit === undefined ? (
    '—'
  ) : (
    <>
      <Badge status={circuit.state} />{' '}
      <span class="muted">
        {circuit.failures} failing in a row
        {circuit.openUntil === null ? '' : `; open until ${utc(circuit.openUntil)}`}
      </span>
    </>
  )

function describeFilter(route: RouteConfig): string {
  const parts = [
    ...(route.filter?.types === undefined ? [] : [`type ${route.filter.types.join(' | ')}`]),
    ...(route.filter?.where ?? []).map((condition) => {
      if (condition.exists !== undefined) return `${condition.path} ${condition.exists ? 'exists' : 'absent'}`
      if (condition.in !== undefined) return `${condition.path} in ${JSON.stringify(condition.in)}`
      return `${condition.path} = ${JSON.stringify(condition.equals)}`
    }),
  ]
  return parts.length === 0 ? 'every event' : parts.join(' and ')
}

function describeLimits(route: RouteConfig): string {
  const forward = route.forward
  if (forward === undefined) return '—'
  return [
    forward.rateLimit === undefined ? undefined : `${forward.rateLimit.perSecond}/s`,
    forward.concurrency === undefined ? undefined : `${forward.concurrency} at once`,
    `opens after ${forward.circuitBreaker.failureThreshold} failures for ${forward.circuitBreaker.coolDownMs / 1000} s`,
  ]
    .filter((part) => part !== undefined)
    .join(', ')
}
