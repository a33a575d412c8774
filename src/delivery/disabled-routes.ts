import type { Database } from '../db/client.js'
import { listDisabledRoutes } from '../db/event-routes.js'

/** What a source's own forward knows of the routes a 410 Gone disabled. */
export interface DisabledRoutes {
  /** Why the route is disabled, or undefined when it is not. */
  reason(source: string, routeId: string): Promise<string | undefined>
  /** This process just disabled it. */
  disabled(source: string, routeId: string, reason: string): void
}

/**
 * How long the disabled routes read stay current: every source's own forward looks at them before
 * each send, and a read per event would be a statement per event on the path that has two. A 410
 * seen by another worker process stops this one's sends within this long; a send meanwhile is
 * answered 410 again and paused too, and a route re-enabled is sent to at the next recheck after it.
 */
const DISABLED_ROUTES_FRESH_MS = 1000

/** The disabled routes, read at most once per DISABLED_ROUTES_FRESH_MS and shared by every caller. */
export function disabledRoutesView(db: Database): DisabledRoutes {
  let read: { at: number; routes: Promise<Map<string, string>> } | undefined
  const current = () => {
    if (read === undefined || Date.now() - read.at >= DISABLED_ROUTES_FRESH_MS) {
      const routes = listDisabledRoutes(db.$client).then(
        (rows) => new Map(rows.map((row) => [`${row.source}/${row.routeId}`, row.reason])),
      )
      const made = { at: Date.now(), routes }
      // A failed read is not kept: the next caller reads again.
      routes.catch(() => {
        if (read === made) read = undefined
      })
      read = made
    }
    return read.routes
  }
  return {
    async reason(source, routeId) {
      return (await current()).get(`${source}/${routeId}`)
    },
    disabled(source, routeId, reason) {
      void current()
        .then((routes) => routes.set(`${source}/${routeId}`, reason))
        .catch(() => {})
    },
  }
}
