import type { FC } from 'hono/jsx'
import type { Overview, OverviewWindow, SourceStats } from '../../db/overview-queries.js'
import { type Bar, ChartLegend, DeliveryChart } from './chart.js'
import { Layout, NavLink, type PageProps } from './layout.js'
import { Table } from './tables.js'

export interface OverviewView {
  window: OverviewWindow
  source: string | undefined
  refresh: number | undefined
  sources: readonly string[]
}

/** `/admin`: what happened in the last hour or day, drawn, with the numbers a person acts on. */
export const OverviewPage: FC<{ page: PageProps; view: OverviewView; overview: Overview }> = ({
  page,
  view,
  overview,
}) => {
  const minutesPerBucket = overview.bucketMs / 60_000
  const unit = minutesPerBucket === 1 ? 'per minute' : `per minute, ${minutesPerBucket}-minute average`
  const total = overview.stats.find((s) => s.source === undefined) ?? emptyStats()
  const perSource = overview.stats.filter(
    (s): s is SourceStats & { source: string } => s.source !== undefined,
  )
  const awaiting = awaitingBySource(overview)
  const awaitingShown =
    view.source === undefined
      ? sum(overview.awaitingApproval.map((a) => a.count))
      : (awaiting.get(view.source) ?? 0)
  // This view with `changes`, marked as the current one when it already shows them.
  const tab = (changes: Partial<OverviewView>, label: string) => (
    <NavLink
      href={overviewHref({ ...view, ...changes })}
      on={Object.entries(changes).every(([name, value]) => view[name as keyof OverviewView] === value)}
    >
      {label}
    </NavLink>
  )
  const eventsHref = (extra: Record<string, string>) =>
    `/admin/events?${new URLSearchParams({ from: overview.from.toISOString(), ...extra })}`
  return (
    <Layout {...page} refreshSeconds={view.refresh}>
      <h1>Overview</h1>
      <div class="tabs">
        {tab({ window: 'hour' }, 'Last hour')}
        {tab({ window: 'day' }, 'Last day')}
        <span class="muted">·</span>
        {tab({ source: undefined }, 'All sources')}
        {view.sources.map((source) => tab({ source }, source))}
        <span class="muted">· Auto-refresh:</span>
        {tab({ refresh: undefined }, 'off')}
        {tab({ refresh: 30 }, '30 s')}
      </div>

      <div class="stats">
        <Stat label="Received" value={String(total.received)} />
        <Stat label="FAILED" value={String(total.failed)} tone={total.failed > 0 ? 'bad' : undefined} />
        <Stat label="In flight now" value={String(total.inFlight)} />
        {total.paused === 0 ? null : (
          <Stat label="Paused (route disabled)" value={String(total.paused)} tone="warn" />
        )}
        <Stat
          label="Awaiting approval now"
          value={String(awaitingShown)}
          tone={awaitingShown > 0 ? 'warn' : undefined}
        />
        <Stat label="Latency p50" value={millis(total.p50Ms)} />
        <Stat label="Latency p99" value={millis(total.p99Ms)} />
      </div>

      <section class="card">
        <strong>Deliveries {unit}</strong>
        <span class="muted">
          {' '}
          by current status, {view.source ?? 'all sources'}, received {utcShort(overview.from)} to{' '}
          {utcShort(overview.to)}
        </span>
        <ChartLegend />
        <DeliveryChart
          bars={barsOf(overview, view.source)}
          labelEvery={view.window === 'hour' ? 10 : 12}
          unit={unit}
        />
      </section>

      <h2>Per source</h2>
      <Table
        rows={perSource}
        empty="Nothing was received in this window."
        columns={[
          {
            head: 'Source',
            cell: (stats) => <a href={eventsHref({ source: stats.source })}>{stats.source}</a>,
          },
          { head: 'Received', cell: (stats) => stats.received },
          {
            head: 'FAILED',
            cell: (stats) =>
              stats.failed === 0 ? (
                '0'
              ) : (
                <a href={eventsHref({ source: stats.source, status: 'failed' })} class="badge b-bad">
                  {stats.failed}
                </a>
              ),
          },
          {
            head: 'In flight',
            cell: (stats) => (
              <>
                {stats.inFlight}
                {stats.paused === 0 ? null : <span class="muted"> · {stats.paused} paused</span>}
              </>
            ),
          },
          { head: 'Awaiting approval', cell: (stats) => awaiting.get(stats.source) ?? 0 },
          { head: 'p50', cell: (stats) => millis(stats.p50Ms) },
          { head: 'p99', cell: (stats) => millis(stats.p99Ms) },
          {
            head: 'Deliveries',
            cell: (stats) => (
              <DeliveryChart bars={barsOf(overview, stats.source)} labelEvery={1} compact unit={unit} />
            ),
          },
        ]}
      />
      <p class="muted">
        Latency is receipt to DONE or FAILED, over the events of the window that were processed. Counts are of
        deliveries received in the window, by their status now; awaiting approval counts operations waiting
        for a decision now, by the source in their key.
      </p>
    </Layout>
  )
}

const Stat: FC<{ label: string; value: string; tone?: 'bad' | 'warn' | undefined }> = (props) => (
  <div class={props.tone === undefined ? 'stat' : `stat ${props.tone}`}>
    <span class="muted">{props.label}</span>
    <b>{props.value}</b>
  </div>
)

export function overviewHref(view: OverviewView): string {
  const params = new URLSearchParams()
  if (view.window !== 'hour') params.set('window', view.window)
  if (view.source !== undefined) params.set('source', view.source)
  if (view.refresh !== undefined) params.set('refresh', String(view.refresh))
  const query = params.toString()
  return query === '' ? '/admin' : `/admin?${query}`
}

/** Every bucket of the window, empty ones included, as deliveries per minute. */
function barsOf(overview: Overview, source: string | undefined): Bar[] {
  const count = Math.round((overview.to.getTime() - overview.from.getTime()) / overview.bucketMs)
  const minutes = overview.bucketMs / 60_000
  const bars: Bar[] = Array.from({ length: count }, (_, i) => ({
    at: new Date(overview.from.getTime() + i * overview.bucketMs),
    done: 0,
    inFlight: 0,
    failed: 0,
  }))
  for (const row of overview.buckets) {
    if (source !== undefined && row.source !== source) continue
    const bar = bars[Math.floor((row.at.getTime() - overview.from.getTime()) / overview.bucketMs)]
    if (bar === undefined) continue
    const perMinute = row.count / minutes
    if (row.status === 'done') bar.done += perMinute
    else if (row.status === 'failed') bar.failed += perMinute
    else bar.inFlight += perMinute
  }
  return bars
}

/** Operation keys carry their source percent-encoded: `<source>:<event id>:<step>`. */
function awaitingBySource(overview: Overview): Map<string, number> {
  const counts = new Map<string, number>()
  for (const { keySource, count } of overview.awaitingApproval) {
    let source = keySource
    try {
      source = decodeURIComponent(keySource)
    } catch {
      // Not an encoding this page made (an agent's own key): count it under its text.
    }
    counts.set(source, (counts.get(source) ?? 0) + count)
  }
  return counts
}

function emptyStats(): SourceStats {
  return {
    source: undefined,
    received: 0,
    failed: 0,
    inFlight: 0,
    paused: 0,
    p50Ms: undefined,
    p99Ms: undefined,
  }
}

function millis(value: number | undefined): string {
  if (value === undefined) return '—'
  return value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(value < 10_000 ? 2 : 1)} s`
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0)
}

function utcShort(date: Date): string {
  return `${date.toISOString().slice(0, 16).replace('T', ' ')}Z`
}
