import type { Database } from '../db/client.js'
import { listDisabledRoutes } from '../db/event-routes.js'

/** What a source's own forward knows of the routes a 410 Gone disabled. */
export interface DisabledRoutes {
  /**
   * Why the route is disabled, or undefined when it is not. A disabled answer always comes from a
   * read that started after this call: a route just re-enabled (its paused deliveries made due at
   * once) is never answered disabled from an older read, which would pause them again.
   */
  reason(source: string, routeId: string): Promise<string | undefined>
  /** This process just disabled it. */
  disabled(source: string, routeId: string, reason: string): void
}

/**
 * How long the disabled routes read stay current for an enabled answer: every source's own forward
 * looks at them before each send, and a read per event would be a statement per event on the path
 * that has two. A 410 seen by another worker process stops this one's sends within this long; a send
 * meanwhile is answered 410 again and paused too.
 */
const DISABLED_ROUTES_FRESH_MS = 1000

interface Read {
  at: number
  /** Reads are numbered as they start: a read numbered above a call's count started after it. */
  number: number
  routes: Promise<Map<string, string>>
}

/**
 * The disabled routes, read at most once per DISABLED_ROUTES_FRESH_MS while every route asked about
 * is enabled, and shared by every caller. Only deliveries to a disabled route read more often (one
 * read shared by all the calls made before it started), and they are paused anyway.
 */
export function disabledRoutesView(db: Database): DisabledRoutes {
  let latest: Read | undefined
  let started = 0
  const readNow = () => {
    const routes = listDisabledRoutes(db.$client).then(
      (rows) => new Map(rows.map((row) => [`${row.source}/${row.routeId}`, row.reason])),
    )
    started += 1
    const made = { at: Date.now(), number: started, routes }
    // A failed read is not kept: the next caller reads again.
    routes.catch(() => {
      if (latest === made) latest = undefined
    })
    latest = made
    return made
  }
  const current = () =>
    latest === undefined || Date.now() - latest.at >= DISABLED_ROUTES_FRESH_MS ? readNow() : latest
  return {
    async reason(source, routeId) {
      const startedBefore = started
      const key = `${source}/${routeId}`
      const cached = current()
      const reason = (await cached.routes).get(key)
      if (reason === undefined || cached.number > startedBefore) return reason
      // Disabled by a read that started before this call: confirm it with one that did not.
      const fresh = latest !== undefined && latest.number > startedBefore ? latest : readNow()
      return (await fresh.routes).get(key)
    },
    disabled(source, routeId, reason) {
      void current()
        .routes.then((routes) => routes.set(`${source}/${routeId}`, reason))
        .catch(() => {})
    },
  }
}
