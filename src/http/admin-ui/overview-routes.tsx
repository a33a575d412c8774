import { Hono } from 'hono'
import { z } from 'zod'
import type { Database } from '../../db/client.js'
import { readOverview } from '../../db/overview-queries.js'
import { describeIssues, searchText } from './filters.js'
import type { AdminEnv } from './guard.js'
import { MessagePage } from './layout.js'
import { OverviewPage } from './overview.js'

const overviewQuery = z.object({
  window: z.enum(['hour', 'day']).default('hour'),
  source: searchText(200)
    .transform((value) => (value === '' ? undefined : value))
    .optional(),
  // A meta refresh, so the page stays script-free; bounded so a link cannot make it hammer the server.
  refresh: z.coerce.number().int().min(10).max(3600).optional(),
})

/** `/admin`: the overview. */
export function overviewRoutes(deps: { db: Database; sources: readonly string[] }) {
  return new Hono<AdminEnv>().get('/', async (c) => {
    const user = { name: c.get('session').name, csrf: c.get('csrf') }
    const parsed = overviewQuery.safeParse(c.req.query())
    if (!parsed.success) {
      const title = `Bad overview query: ${describeIssues(parsed.error)}`
      return c.html(
        <MessagePage
          props={{ title, user, section: 'overview' }}
          back={{ href: '/admin', label: '« Overview' }}
        />,
        400,
      )
    }
    const { window, source, refresh } = parsed.data
    const overview = await readOverview(deps.db, window, source)
    const seen = overview.stats.flatMap((s) => (s.source === undefined ? [] : [s.source]))
    const sources = [...new Set([...deps.sources, ...seen, ...(source === undefined ? [] : [source])])].sort()
    return c.html(
      <OverviewPage
        page={{ title: 'Overview', user, section: 'overview' }}
        view={{ window, source, refresh, sources }}
        overview={overview}
      />,
    )
  })
}
