import type { FC } from 'hono/jsx'
import type { EventDetail } from '../../db/event-queries.js'
import type { EventRouteRow } from '../../db/event-routes.js'
import type { OperationRow } from '../../db/operation-rows.js'
import type { OrderingHead } from '../../db/ordering.js'
import { traceIdOf } from '../../tracing.js'
import { Badge, CsrfField, Layout, type PageProps, utc } from './layout.js'
import { duration } from './operation.js'
import { Facts, lastError, Table } from './tables.js'

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
  // route's operation is `exhausted` only until the route is re-enabled. A source's own forward
  // keeps no route rows and no operation: an event without route rows that waits, waits on it.
  const pausedRoutes = routes.filter((route) => route.status === 'paused').map((route) => route.routeId)
  const paused = event.status === 'pending' && event.paused
  const forwardPaused = paused && routes.length === 0
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

      {forwardPaused ? (
        <div class="notice" role="status">
          Forward paused: <span class="mono">{event.source}/forward</span> is disabled; re-enable it under{' '}
          <a href="/admin/routes">Routes</a> to send again.
        </div>
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

      <Facts
        facts={[
          { name: 'Row id', value: event.id, class: 'mono' },
          { name: 'Type', value: event.eventType ?? '—' },
          {
            name: 'Authenticated by',
            value:
              event.origin === 'backfill'
                ? "the provider's API (backfill), not a signature"
                : "the delivery's signature (webhook)",
          },
          { name: 'Payload sha256', value: event.payloadHash, class: 'mono' },
          {
            name: 'Trace id',
            value: traceIdOf(event.traceParent) ?? '— (received with tracing off)',
            class: 'mono',
          },
          { name: 'Received', value: utc(event.receivedAt), class: 'mono' },
          { name: 'Enqueued', value: utc(event.enqueuedAt), class: 'mono' },
          { name: 'Processed', value: utc(event.processedAt), class: 'mono' },
          { name: 'Attempts (this round)', value: String(event.attempts) },
          { name: 'Replays', value: String(event.replays) },
          { name: 'Next attempt', value: utc(event.nextAttemptAt), class: 'mono' },
          { name: 'Last error', value: event.lastError ?? '—' },
        ]}
      />

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
      <Table
        rows={attempts}
        empty="No attempt has finished yet."
        columns={[
          { head: 'Round', cell: (a) => (a.replay === 0 ? 'received' : `replay ${a.replay}`) },
          { head: '#', cell: (a) => a.attempt },
          { head: 'Outcome', cell: (a) => <Badge status={a.outcome} /> },
          { head: 'Started', class: 'mono', cell: (a) => utc(a.startedAt) },
          { head: 'Duration', cell: (a) => duration(a.startedAt, a.finishedAt) },
          {
            head: 'Response',
            style: 'min-width:220px',
            cell: (a) => (
              <>
                {a.responseStatus === null ? null : (
                  <span class={`badge ${a.responseStatus < 300 ? 'b-ok' : 'b-bad'}`}>{a.responseStatus}</span>
                )}
                {a.responseExcerpt === null || a.responseExcerpt === '' ? null : (
                  <pre class="excerpt">{a.responseExcerpt}</pre>
                )}
              </>
            ),
          },
          { head: 'Error', class: 'err', cell: (a) => a.error ?? '' },
        ]}
      />

      {replays.length === 0 ? null : (
        <>
          <h2>Replays</h2>
          <Table
            rows={replays}
            columns={[
              { head: 'Round', cell: (r) => `replay ${r.replay}` },
              { head: 'By', cell: (r) => r.by },
              { head: 'At', class: 'mono', cell: (r) => utc(r.at) },
              { head: 'Attempts before', cell: (r) => r.previousAttempts },
              { head: 'Error before', class: 'err', cell: (r) => r.previousError ?? '' },
            ]}
          />
        </>
      )}

      <EventRoutes routes={routes} />

      <h2>Operations it caused</h2>
      <Table
        rows={operations}
        empty="None: the handler made no call through the outbound ledger."
        columns={[
          {
            head: 'Key',
            class: 'mono',
            cell: (op) => <a href={`/admin/operations/${op.id}`}>{op.operationKey}</a>,
          },
          { head: 'Tool', cell: (op) => op.tool },
          { head: 'Effect', cell: (op) => op.effectClass },
          {
            head: 'Status',
            cell: (op) => (
              <>
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
              </>
            ),
          },
          { head: 'Attempts', cell: (op) => op.attempts },
          { head: 'Downstream id', class: 'mono', cell: (op) => op.downstreamId ?? '' },
          { head: 'Last error', shown: (op) => lastError(op.status, op.lastError) },
        ]}
      />
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
      <Table
        rows={routes}
        columns={[
          { head: 'Route', class: 'mono', cell: (route) => <a href="/admin/routes">{route.routeId}</a> },
          { head: 'Status', cell: (route) => <Badge status={route.status} /> },
          { head: 'Attempts', cell: (route) => route.attempts },
          { head: 'Response', cell: (route) => route.responseStatus ?? '' },
          { head: 'Updated', class: 'mono', cell: (route) => utc(route.updatedAt) },
          {
            head: 'Last error',
            class: 'err',
            cell: (route) => (route.status === 'done' ? '' : (route.lastError ?? '')),
          },
        ]}
      />
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
