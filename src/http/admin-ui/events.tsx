import type { FC } from 'hono/jsx'
import type { EventCursor, EventFilter, EventSummary } from '../../db/event-queries.js'
import { eventStatus } from '../../db/schema.js'
import { describePayload, encodeCursor, filterParams } from './filters.js'
import { Badge, CsrfField, Layout, type PageProps, utc } from './layout.js'
import { Table } from './tables.js'

export interface EventsPageProps {
  page: PageProps & { user: { name: string; csrf: string } }
  filter: EventFilter
  sources: readonly string[]
  events: readonly EventSummary[]
  next: EventCursor | undefined
  /** True when this is not the first page. */
  paged: boolean
}

/** The event list: filters (a GET form, so a filtered view is a link), the rows, paging, bulk replay. */
export const EventsPage: FC<EventsPageProps> = ({ page, filter, sources, events, next, paged }) => {
  const params = filterParams(filter)
  const link = (extra: Array<[string, string]>) =>
    `/admin/events?${new URLSearchParams([...params, ...extra])}`
  return (
    <Layout {...page}>
      <h1>Events</h1>
      <form class="filters" method="get" action="/admin/events">
        <label>
          Event id (exact)
          <input name="event_id" value={filter.eventId ?? ''} placeholder="evt_1N2b…" size={18} />
        </label>
        <label>
          Payload field
          <input
            name="payload"
            value={filter.payload === undefined ? '' : describePayload(filter.payload)}
            placeholder="data.object.customer = cus_123"
            size={28}
          />
        </label>
        <label>
          Source
          <select name="source">
            <option value="">any</option>
            {withCurrent(sources, filter.source).map((source) => (
              <option value={source} selected={filter.source === source}>
                {source}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select name="status">
            <option value="">any</option>
            {eventStatus.enumValues.map((status) => (
              <option value={status} selected={filter.status === status}>
                {status.toUpperCase()}
              </option>
            ))}
          </select>
        </label>
        <label>
          Type
          <input name="type" value={filter.type ?? ''} placeholder="e.g. invoice.*" />
        </label>
        <label>
          Route not done
          <input name="route" value={filter.route ?? ''} placeholder="a route id" />
        </label>
        <label>
          Received from (UTC)
          <input type="datetime-local" step="1" name="from" value={localValue(filter.from)} />
        </label>
        <label>
          to (UTC)
          <input type="datetime-local" step="1" name="to" value={localValue(filter.to)} />
        </label>
        <button type="submit">Filter</button>
        <a href="/admin/events">Clear</a>
      </form>

      <Table
        rows={events}
        empty={`No events match${paged ? ' on this page' : ''}.`}
        columns={[
          { head: 'Received', class: 'mono', cell: (event) => utc(event.receivedAt) },
          { head: 'Source', cell: (event) => event.source },
          {
            head: 'Event id',
            class: 'mono',
            cell: (event) => (
              <>
                <a href={`/admin/events/${event.id}`}>{event.eventId}</a>
                {event.origin === 'backfill' ? (
                  <span class="muted" title="fetched from the provider's API, not a signed delivery">
                    {' '}
                    (backfill)
                  </span>
                ) : null}
              </>
            ),
          },
          { head: 'Type', cell: (event) => event.eventType ?? '—' },
          {
            head: 'Status',
            cell: (event) =>
              event.paused && event.status === 'pending' ? (
                <span title="waiting behind a route a destination disabled (410 Gone): re-enable it under Routes">
                  <Badge status="paused" />
                </span>
              ) : (
                <Badge status={event.status} />
              ),
          },
          {
            head: 'Attempts',
            cell: (event) => (
              <>
                {event.attempts}
                {event.replays > 0 ? <span class="muted"> · replayed {event.replays}×</span> : null}
              </>
            ),
          },
          { head: 'Last error', class: 'err', cell: (event) => truncate(event.lastError, 160) },
        ]}
      />

      <div class="pager">
        {paged ? <a href={link([])}>« First page</a> : null}
        {next === undefined ? null : <a href={link([['after', encodeCursor(next)]])}>Next page »</a>}
      </div>

      <h2>Replay FAILED events</h2>
      <form method="post" action="/admin/events/replay" class="card row">
        <CsrfField token={page.user.csrf} />
        {params.map(([name, value]) => (
          <input type="hidden" name={name} value={value} />
        ))}
        <span>
          Replays every FAILED event matching the filter above ({describeFilter(filter)}), oldest first, in
          chunks of 1,000 until none is left. Each handler runs again, only for its routes not done yet; its
          outbound calls keep their keys.
        </span>
        <button type="submit" class="danger">
          Replay FAILED events
        </button>
      </form>
    </Layout>
  )
}

/** A source no longer configured still has events: keep it selectable while it is the filter. */
function withCurrent(sources: readonly string[], current: string | undefined): readonly string[] {
  return current === undefined || sources.includes(current) ? sources : [...sources, current]
}

function localValue(date: Date | undefined): string {
  return date === undefined ? '' : date.toISOString().slice(0, 19)
}

function truncate(text: string | null, max: number): string {
  if (text === null) return ''
  return text.length > max ? `${text.slice(0, max)}…` : text
}

function describeFilter(filter: EventFilter): string {
  const parts = filterParams({ ...filter, status: undefined }).map(([name, value]) => `${name} ${value}`)
  return parts.length === 0 ? 'all sources, any time' : parts.join(', ')
}
