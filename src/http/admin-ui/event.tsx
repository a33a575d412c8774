import type { FC } from 'hono/jsx'
import type { EventDetail } from '../../db/event-queries.js'
import type { EventRouteRow } from '../../db/event-routes.js'
import type { OperationRow } from '../../db/operation-rows.js'
import type { OrderingHead } from '../../db/ordering.js'
import { traceIdOf } from '../../tracing.js'
import { Badge, CsrfField, Fact, LastError, Layout, type PageProps, utc } from './layout.js'
import { duration } from './operation.js'

export interface EventPageProps {
  page: PageProps & { user: { name: string; csrf: string } }
  detail: EventDetail
  operations: readonly OperationRow[]
  /** The routes the event matched (a source with `routes`); empty for a single handler. */
  routes: readonly EventRouteRow[]
  /** The earlier event with the same ordering key that holds this one back. */
  blockedBy?: (OrderingHead & { pointer: string }) | undefined
}

/** One event: what arrived (headers, exact body), what the worker did with it, and what it caused. */
export const EventPage: FC<EventPageProps> = ({ page, detail, operations, routes, blockedBy }) => {
  const { event, attempts, replays } = detail
  // PENDING behind a route a destination disabled (410 Gone) waits for a person, not a worker; its
  // route's operation is `exhausted` only until the route is re-enabled.
  const pausedRoutes = routes.filter((route) => route.status === 'paused').map((route) => route.routeId)
  const paused = event.status === 'pending' && pausedRoutes.length > 0
  const ofPausedRoute = (key: string) => pausedRoutes.some((routeId) => key.endsWith(`:route:${routeId}`))
  return (
    <Layout {...page}>
      <div class="row">
        <h1 style="margin:0">
          {event.source} / <span class="mono">{event.eventId}</span>
        </h1>
        <Badge status={paused ? 'paused' : event.status} />
        {event.status === 'failed' ? (
          <form method="post" action={`/admin/events/${event.id}/replay`}>
            <CsrfField token={page.user.csrf} />
            <button type="submit" class="danger">
              Replay
            </button>
          </form>
        ) : null}
      </div>
      <p class="muted">
        <a href="/admin/events">« Events</a>
      </p>
      {event.origin === 'backfill' ? (
        <p class="notice" data-origin="backfill">
          Fetched by backfill: this event was read from the provider's API by an authenticated list call after
          its webhook was missed. It carries no provider signature, and its body is the API's rendering of the
          event, not the bytes a webhook would have carried.
        </p>
      ) : null}

      {blockedBy === undefined ? null : (
        <div class="notice bad" role="status">
          Held back by its ordering key ({blockedBy.pointer}): event{' '}
          <a href={`/admin/events/${blockedBy.id}`} class="mono">
            {blockedBy.eventId}
          </a>{' '}
          came first and is {blockedBy.status.toUpperCase()}
          {blockedBy.status === 'failed' ? '; replay it to let the events behind it go.' : '.'}
        </div>
      )}

      <table class="facts">
        <tbody>
          <Fact name="Row id" mono value={event.id} />
          <Fact name="Type" value={event.eventType ?? '—'} />
          <Fact
            name="Authenticated by"
            value={
              event.origin === 'backfill'
                ? "the provider's API (backfill), not a signature"
                : "the delivery's signature (webhook)"
            }
          />
          <Fact name="Payload sha256" mono value={event.payloadHash} />
          <Fact
            name="Trace id"
            mono
            value={traceIdOf(event.traceParent) ?? '— (received with tracing off)'}
          />
          <Fact name="Received" mono value={utc(event.receivedAt)} />
          <Fact name="Enqueued" mono value={utc(event.enqueuedAt)} />
          <Fact name="Processed" mono value={utc(event.processedAt)} />
          <Fact name="Attempts (this round)" value={String(event.attempts)} />
          <Fact name="Replays" value={String(event.replays)} />
          <Fact name="Next attempt" mono value={utc(event.nextAttemptAt)} />
          <Fact name="Last error" value={event.lastError ?? '—'} />
        </tbody>
      </table>

      <div class="grid2">
        <section>
          <h2>Headers</h2>
          <table class="headers">
            <tbody>
              {Object.entries(event.headers).map(([name, value]) => (
                <tr>
                  <th class="mono" style="text-transform:none">
                    {name}
                  </th>
                  <td class="mono" style="overflow-wrap:anywhere">
                    {value}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
        <section>
          <h2>Body ({event.body.length} bytes)</h2>
          <pre>{prettyBody(event.body)}</pre>
        </section>
      </div>

      <h2>Attempts</h2>
      {attempts.length === 0 ? (
        <p class="muted">No attempt has finished yet.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th>Round</th>
              <th>#</th>
              <th>Outcome</th>
              <th>Started</th>
              <th>Duration</th>
              <th>Response</th>
              <th>Error</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => (
              <tr>
                <td>{a.replay === 0 ? 'received' : `replay ${a.replay}`}</td>
                <td>{a.attempt}</td>
                <td>
                  <Badge status={a.outcome} />
                </td>
                <td class="mono">{utc(a.startedAt)}</td>
                <td>{duration(a.startedAt, a.finishedAt)}</td>
                <td style="min-width:220px">
                  {a.responseStatus === null ? null : (
                    <span class={`badge ${a.responseStatus < 300 ? 'b-ok' : 'b-bad'}`}>
                      {a.responseStatus}
                    </span>
                  )}
                  {a.responseExcerpt === null || a.responseExcerpt === '' ? null : (
                    <pre class="excerpt">{a.responseExcerpt}</pre>
                  )}
                </td>
                <td class="err">{a.error ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}

      {replays.length === 0 ? null : (
        <>
          <h2>Replays</h2>
          <table>
            <thead>
              <tr>
                <th>Round</th>
                <th>By</th>
                <th>At</th>
                <th>Attempts before</th>
                <th>Error before</th>
              </tr>
            </thead>
            <tbody>
              {replays.map((r) => (
                <tr>
                  <td>replay {r.replay}</td>
                  <td>{r.by}</td>
                  <td class="mono">{utc(r.at)}</td>
                  <td>{r.previousAttempts}</td>
                  <td class="err">{r.previousError ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}

      <EventRoutes routes={routes} />

      <h2>Operations it caused</h2>
      {operations.length === 0 ? (
        <p class="muted">None: the handler made no call through the outbound ledger.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th>Key</th>
              <th>Tool</th>
              <th>Effect</th>
              <th>Status</th>
              <th>Attempts</th>
              <th>Downstream id</th>
              <th>Last error</th>
            </tr>
          </thead>
          <tbody>
            {operations.map((op) => (
              <tr>
                <td class="mono">
                  <a href={`/admin/operations/${op.id}`}>{op.operationKey}</a>
                </td>
                <td>{op.tool}</td>
                <td>{op.effectClass}</td>
                <td>
                  {op.status === 'awaiting_approval' ? (
                    <a href="/admin/approvals">
                      <Badge status={op.status} />
                    </a>
                  ) : (
                    <Badge status={op.status} />
                  )}
                  {ofPausedRoute(op.operationKey) ? (
                    <span class="muted"> · route paused: re-enable it under Routes to send again</span>
                  ) : null}
                </td>
                <td>{op.attempts}</td>
                <td class="mono">{op.downstreamId ?? ''}</td>
                <LastError status={op.status} error={op.lastError} />
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Layout>
  )
}

/**
 * One row per route the event matched: done routes are never sent again, so this says which ones a
 * retry or a replay would run. Paused is a route a 410 Gone disabled; waiting is a destination limit.
 */
const EventRoutes: FC<{ routes: readonly EventRouteRow[] }> = ({ routes }) =>
  routes.length === 0 ? null : (
    <>
      <h2>Routes</h2>
      <table>
        <thead>
          <tr>
            <th>Route</th>
            <th>Status</th>
            <th>Attempts</th>
            <th>Response</th>
            <th>Updated</th>
            <th>Last error</th>
          </tr>
        </thead>
        <tbody>
          {routes.map((route) => (
            <tr>
              <td class="mono">
                <a href="/admin/routes">{route.routeId}</a>
              </td>
              <td>
                <Badge status={route.status} />
              </td>
              <td>{route.attempts}</td>
              <td>{route.responseStatus ?? ''}</td>
              <td class="mono">{utc(route.updatedAt)}</td>
              <td class="err">{route.status === 'done' ? '' : (route.lastError ?? '')}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  )

/** JSON indented for reading; any other body as its text. The stored bytes themselves are untouched. */
function prettyBody(body: Buffer): string {
  const text = body.toString('utf8')
  try {
    return JSON.stringify(JSON.parse(text), null, 2)
  } catch {
    return text
  }
}
