import { type Context, Hono } from 'hono'
import { z } from 'zod'
import type { Config } from '../../config/config.js'
import { replayFailedByFilter } from '../../db/bulk-replay.js'
import type { Database } from '../../db/client.js'
import { findEvent, listEvents } from '../../db/event-queries.js'
import { listEventRoutes } from '../../db/event-routes.js'
import { listOperationsByKeyPrefix } from '../../db/operation-queries.js'
import { findOrderingHead, SOURCE_SCOPE } from '../../db/ordering.js'
import { replayEvent } from '../../db/replay.js'
import { compileOrderingKey } from '../../inbound/ordering-keys.js'
import type { Logger } from '../../logger.js'
import { workflowKeyPrefixes } from '../../outbound/keys.js'
import type { Enqueuer } from '../../queue/enqueuer.js'
import { EventPage } from './event.js'
import { EventsPage } from './events.js'
import { describeIssues, eventsQuery, filterOf, filterParams } from './filters.js'
import { type AdminEnv, requireCsrfToken } from './guard.js'
import { MessagePage } from './layout.js'
import { flashNotice, takeNotice } from './notices.js'
import type { AdminSessions } from './session.js'

const PAGE_SIZE = 50
const ALL_EVENTS = { href: '/admin/events', label: '« All events' }
const uuid = z.uuid()

export interface EventRouteDependencies {
  db: Database
  /** The sources' ordering keys, to show what holds an event back. */
  config: Config
  enqueuer: Enqueuer
  logger: Logger
  sessions: AdminSessions
  sources: readonly string[]
}

/** `/admin/events…`: the list, one event, and replays (one, or the FAILED rows of a filter). */
export function eventRoutes(deps: EventRouteDependencies) {
  const page = (title: string, user: { name: string; csrf: string }, c?: Context) => ({
    title,
    user,
    section: 'events' as const,
    notice: c === undefined ? undefined : takeNotice(c),
  })

  /** Hands replayed rows to the queue; if Redis does not take them now, the relay will. */
  const requeue = async (ids: readonly string[]): Promise<boolean> => {
    try {
      // By the rows' own jobs only: the batch job that first carried a row may still be running others.
      await deps.enqueuer.requeue(ids.map((id) => ({ id })))
      return true
    } catch (error) {
      deps.logger.warn(
        { err: error, count: ids.length },
        'replayed rows not requeued now; the relay will enqueue them',
      )
      return false
    }
  }

  /** The earlier event with the same ordering key that this one waits for, if its source has a key. */
  const orderingHeadOf = async (event: { id: string; source: string; status: string; body: Buffer }) => {
    const pointer = deps.config.sources.get(event.source)?.config.orderingKey
    if (pointer === undefined || event.status === 'done') return undefined
    let parsed: unknown
    try {
      parsed = JSON.parse(event.body.toString('utf8'))
    } catch {
      return undefined
    }
    const key = compileOrderingKey(pointer).of(parsed)
    if (key === undefined) return undefined
    const { head } = await findOrderingHead(deps.db.$client, event.id, SOURCE_SCOPE, key)
    return head === undefined ? undefined : { ...head, pointer }
  }

  return new Hono<AdminEnv>()
    .get('/', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const parsed = eventsQuery.safeParse(c.req.query())
      if (!parsed.success) {
        return c.html(
          <MessagePage props={page(`Bad filter: ${describeIssues(parsed.error)}`, user)} back={ALL_EVENTS} />,
          400,
        )
      }
      const filter = filterOf(parsed.data)
      const { events, next } = await listEvents(deps.db, filter, {
        after: parsed.data.after,
        limit: PAGE_SIZE,
      })
      return c.html(
        <EventsPage
          page={page('Events', user, c)}
          filter={filter}
          sources={deps.sources}
          events={events}
          next={next}
          paged={parsed.data.after !== undefined}
        />,
      )
    })
    .post('/replay', requireCsrfToken(deps.sessions), async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const { _csrf, ...fields } = c.get('form')
      const parsed = eventsQuery.safeParse(fields)
      if (!parsed.success) {
        return c.html(<MessagePage props={page(`Bad filter: ${describeIssues(parsed.error)}`, user)} />, 400)
      }
      const filter = filterOf(parsed.data)
      // The whole filter in one action, a chunk per statement (src/db/bulk-replay.ts): if the request
      // dies half way, the chunks done stay done and a second click replays only what is still FAILED.
      let queued = true
      const { replayed } = await replayFailedByFilter(deps.db, {
        filter,
        by: user.name,
        requeue: async (ids) => {
          queued = (await requeue(ids)) && queued
        },
      })
      flashNotice(c, queued ? 'bulk_replayed' : 'replayed_later', replayed)
      // Without the status: the replayed rows are PENDING now, and that is what the person wants to see.
      const params = new URLSearchParams(filterParams({ ...filter, status: undefined }))
      return c.redirect(`/admin/events?${params}`, 303)
    })
    .get('/:id', async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const id = c.req.param('id')
      const detail = uuid.safeParse(id).success ? await findEvent(deps.db, id) : undefined
      if (detail === undefined) {
        return c.html(<MessagePage props={page('No event has that id', user)} back={ALL_EVENTS} />, 404)
      }
      const [operations, routes, blockedBy] = await Promise.all([
        listOperationsByKeyPrefix(deps.db, workflowKeyPrefixes([detail.event.source, detail.event.eventId])),
        listEventRoutes(deps.db, detail.event.id),
        orderingHeadOf(detail.event),
      ])
      return c.html(
        <EventPage
          page={page(`${detail.event.source} ${detail.event.eventId}`, user, c)}
          detail={detail}
          operations={operations}
          routes={routes}
          blockedBy={blockedBy}
        />,
      )
    })
    .post('/:id/replay', requireCsrfToken(deps.sessions), async (c) => {
      const user = { name: c.get('session').name, csrf: c.get('csrf') }
      const id = c.req.param('id')
      const outcome = uuid.safeParse(id).success
        ? await replayEvent(deps.db, id, user.name)
        : ({ kind: 'not_found' } as const)
      switch (outcome.kind) {
        case 'replayed': {
          flashNotice(c, (await requeue([id])) ? 'replayed' : 'replayed_later')
          return c.redirect(`/admin/events/${id}`, 303)
        }
        case 'not_failed':
          return c.html(
            <MessagePage
              props={page(
                `This event is ${outcome.status.toUpperCase()}: only FAILED events can be replayed. Nothing changed.`,
                user,
              )}
              back={{ href: `/admin/events/${id}`, label: '« Back to the event' }}
            />,
            409,
          )
        case 'not_found':
          return c.html(<MessagePage props={page('No event has that id', user)} back={ALL_EVENTS} />, 404)
      }
    })
}
