import type postgres from 'postgres'
import client from 'prom-client'
import type { BackpressureSettings } from '../config/backpressure.js'
import { unfinishedUpTo } from '../db/alert-queries.js'
import { withDeadline } from '../deadline.js'
import type { Logger } from '../logger.js'
import { addGauge, type Metrics } from '../metrics.js'

/**
 * When the ledger cannot keep up, new work is refused with 429 and `Retry-After` (providers and
 * agents retry on it) instead of piling up until requests time out. What was committed is never
 * refused: a 429 comes before the claim, and everything answered 200 is processed as ever. The
 * bounds are `server.backpressure` (src/config/backpressure.ts).
 */

export type BackpressureReason = 'backlog' | 'claim_queue' | 'claim_latency'
const REASONS: readonly BackpressureReason[] = ['backlog', 'claim_queue', 'claim_latency']

export interface Refusal {
  reason: BackpressureReason
  message: string
  retryAfterSeconds: number
}

export interface Backpressure {
  /** Why new work must be refused now, or undefined. Cheap: no I/O. */
  refusal(): Refusal | undefined
  /**
   * A claim transaction committed `rows` new events: they count toward the backlog unless the
   * last count's snapshot already saw that transaction.
   */
  inserted(xid: string, rows: number): void
  /** How long a claim statement took. */
  observeClaim(ms: number): void
  start(): void
  stop(): Promise<void>
}

/** No bound at all: for apps built without one (`createApp` in a test, an embedding). */
export const noBackpressure: Backpressure = {
  refusal: () => undefined,
  inserted: () => {},
  observeClaim: () => {},
  start: () => {},
  stop: async () => {},
}

export function createBackpressure(deps: {
  settings: BackpressureSettings
  sql: postgres.Sql
  /** Claims waiting in the claim batcher now. */
  claimQueue: () => number
  logger: Logger
  metrics: Metrics
}): Backpressure {
  const { settings } = deps
  // The backlog as last counted, plus the rows this process committed in transactions that count's
  // snapshot did not see: exact, however claims and counts interleave. Undefined until counted.
  let counted: number | undefined
  let snapshot: Snapshot | undefined
  const unseen = new Map<bigint, number>()
  const unseenRows = () => {
    let rows = 0
    for (const n of unseen.values()) rows += n
    return rows
  }
  const latencies: Array<{ at: number; ms: number }> = []
  let timer: NodeJS.Timeout | undefined
  let counting: Promise<void> | undefined
  let refusing: BackpressureReason | undefined

  const refusals = new client.Counter<'reason'>({
    name: 'hookledger_backpressure_refusals_total',
    help: "Deliveries and agents' claims refused with 429 because the ledger could not keep up, by reason",
    labelNames: ['reason'],
    registers: [deps.metrics.registry],
  })
  addGauge(deps.metrics, {
    name: 'hookledger_backpressure',
    help: 'Whether this process refuses new work now (1), by reason',
    labelNames: ['reason'],
    read: async () => {
      const now = current()
      return REASONS.map((reason) => ({ labels: { reason }, value: now?.reason === reason ? 1 : 0 }))
    },
  })

  const count = async () => {
    if (settings.maxBacklog === null) return
    try {
      // Bounded: the count stops one past the bound.
      const backlog = await withDeadline(
        unfinishedUpTo(deps.sql, settings.maxBacklog + 1),
        settings.checkIntervalMs * 5,
        'the backlog count did not answer',
      )
      counted = backlog.count
      snapshot = parseSnapshot(backlog.snapshot)
      for (const xid of unseen.keys()) if (visible(xid, snapshot)) unseen.delete(xid)
    } catch (error) {
      // Keep the last figure: a ledger too slow to count is no reason to stop or to open the gate.
      deps.logger.debug({ err: error }, 'backpressure: the backlog could not be counted')
    }
  }

  const p99 = (now: number): number | undefined => {
    while (latencies.length > 0 && (latencies[0]?.at ?? now) < now - settings.windowMs) latencies.shift()
    if (latencies.length === 0) return undefined
    const sorted = latencies.map((l) => l.ms).sort((a, b) => a - b)
    return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]
  }

  function current(): Refusal | undefined {
    const retryAfterSeconds = settings.retryAfterSeconds
    if (settings.maxBacklog !== null && counted !== undefined) {
      const backlog = counted + unseenRows()
      if (backlog >= settings.maxBacklog) {
        return {
          reason: 'backlog',
          message: `the ledger holds ${settings.maxBacklog} or more unfinished events (server.backpressure.maxBacklog); retry later`,
          retryAfterSeconds,
        }
      }
    }
    const queued = deps.claimQueue()
    if (queued >= settings.maxClaimQueue) {
      return {
        reason: 'claim_queue',
        message: `${queued} claims are waiting for the ledger (server.backpressure.maxClaimQueue); retry later`,
        retryAfterSeconds,
      }
    }
    if (settings.maxClaimP99Ms !== null) {
      const slow = p99(Date.now())
      if (slow !== undefined && slow > settings.maxClaimP99Ms) {
        return {
          reason: 'claim_latency',
          message: `the ledger answers claims in ${Math.round(slow)} ms at p99 (over server.backpressure.maxClaimP99Ms); retry later`,
          retryAfterSeconds,
        }
      }
    }
    return undefined
  }

  return {
    refusal() {
      const now = current()
      if (now !== undefined) refusals.inc({ reason: now.reason })
      if (now?.reason !== refusing) {
        // One line per change, not per refused request.
        if (now !== undefined) deps.logger.warn({ reason: now.reason }, `backpressure: ${now.message}`)
        else deps.logger.info({ reason: refusing }, 'backpressure: new work is accepted again')
        refusing = now?.reason
      }
      return now
    },
    inserted(xid, rows) {
      if (settings.maxBacklog === null) return
      const id = BigInt(xid)
      // Committed before the last count's snapshot was taken: that count has these rows already.
      if (snapshot !== undefined && visible(id, snapshot)) return
      unseen.set(id, (unseen.get(id) ?? 0) + rows)
    },
    observeClaim(ms) {
      if (settings.maxClaimP99Ms === null) return
      latencies.push({ at: Date.now(), ms })
      // Bounded memory however fast claims come: the newest observations decide.
      if (latencies.length > 10_000) latencies.splice(0, latencies.length - 10_000)
    },
    start() {
      if (settings.maxBacklog === null || timer !== undefined) return
      // One count at a time: a slow ledger must not stack them up.
      const tick = () => {
        counting ??= count().finally(() => {
          counting = undefined
        })
      }
      tick()
      timer = setInterval(tick, settings.checkIntervalMs)
      timer.unref()
    },
    async stop() {
      clearInterval(timer)
      timer = undefined
      await counting
    },
  }
}

/** PostgreSQL's `pg_snapshot`: transactions below xmin are done, xip were running, from xmax on had not begun. */
interface Snapshot {
  xmin: bigint
  xmax: bigint
  running: ReadonlySet<bigint>
}

function parseSnapshot(text: string): Snapshot {
  const [xmin = '0', xmax = '0', running = ''] = text.split(':')
  return {
    xmin: BigInt(xmin),
    xmax: BigInt(xmax),
    running: new Set(running === '' ? [] : running.split(',').map((xid) => BigInt(xid))),
  }
}

/** Whether a committed transaction's rows are seen by the snapshot (pg_visible_in_snapshot). */
function visible(xid: bigint, snapshot: Snapshot): boolean {
  return xid < snapshot.xmin || (xid < snapshot.xmax && !snapshot.running.has(xid))
}
