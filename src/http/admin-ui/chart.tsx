import type { FC } from 'hono/jsx'

/** One bar of the chart: deliveries per minute in a bucket, by outcome. */
export interface Bar {
  at: Date
  done: number
  inFlight: number
  failed: number
}

// Drawn on the server as plain SVG: the page's policy allows no script, and the chart needs none.
const SERIES = [
  { key: 'done', label: 'DONE', color: '#1f7a4d' },
  { key: 'inFlight', label: 'PENDING / PROCESSING', color: '#3b82f6' },
  { key: 'failed', label: 'FAILED', color: '#b42318' },
] as const

export const ChartLegend: FC = () => (
  <div class="legend">
    {SERIES.map((series) => (
      <span>
        <i style={`background:${series.color}`} />
        {series.label}
      </span>
    ))}
  </div>
)

/**
 * Stacked bars, one per bucket. `labelEvery` buckets get a time under the axis; each bar has a
 * <title>, which browsers show as a tooltip on hover. `compact` draws a small one for a table row.
 */
export const DeliveryChart: FC<{
  bars: readonly Bar[]
  labelEvery: number
  compact?: boolean
  unit: string
}> = ({ bars, labelEvery, compact = false, unit }) => {
  const width = compact ? 240 : 960
  const height = compact ? 40 : 220
  const left = compact ? 0 : 60
  const bottom = compact ? 0 : 22
  const top = compact ? 2 : 18
  const plotWidth = width - left - (compact ? 0 : 8)
  const plotHeight = height - top - bottom
  const max = niceCeiling(Math.max(0, ...bars.map((b) => b.done + b.inFlight + b.failed)))
  const step = plotWidth / Math.max(1, bars.length)
  const y = (value: number) => (value / max) * plotHeight
  return (
    <svg
      class="chart"
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      aria-label={`deliveries per minute, ${bars.length} buckets, peak ${format(max)} ${unit}`}
      style={compact ? 'max-width:240px;background:transparent' : undefined}
    >
      {compact
        ? null
        : [0, 0.5, 1].map((fraction) => (
            <g>
              <line
                x1={left}
                x2={width - 8}
                y1={top + plotHeight - fraction * plotHeight}
                y2={top + plotHeight - fraction * plotHeight}
                stroke="#e4e7eb"
              />
              <text x={left - 6} y={top + plotHeight - fraction * plotHeight + 4} text-anchor="end">
                {format(max * fraction)}
              </text>
            </g>
          ))}
      {bars.map((bar, index) => {
        const x = left + index * step
        let base = top + plotHeight
        const segments = SERIES.map((series) => {
          const h = y(bar[series.key])
          base -= h
          return h <= 0 ? null : (
            <rect
              x={x + step * 0.1}
              y={base}
              width={Math.max(step * 0.8, 0.5)}
              height={h}
              fill={series.color}
            />
          )
        })
        return (
          <g>
            <title>{`${clock(bar.at)} UTC: ${format(bar.done)} done, ${format(bar.inFlight)} in flight, ${format(bar.failed)} failed (${unit})`}</title>
            {/* A transparent full-height target, so the tooltip shows over empty buckets too. */}
            <rect x={x} y={top} width={step} height={plotHeight} fill="transparent" />
            {segments}
            {compact || index % labelEvery !== 0 ? null : (
              <text x={x} y={height - 6}>
                {clock(bar.at)}
              </text>
            )}
          </g>
        )
      })}
    </svg>
  )
}

/** 1, 2 or 5 times a power of ten, at least the value: axis labels a person reads at a glance. */
function niceCeiling(value: number): number {
  if (value <= 0) return 1
  const power = 10 ** Math.floor(Math.log10(value))
  const ceiling = [1, 2, 5, 10].map((m) => m * power).find((candidate) => candidate >= value)
  return ceiling ?? 10 * power
}

function format(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(value < 10 ? 1 : 0)
}

function clock(date: Date): string {
  return date.toISOString().slice(11, 16)
}
