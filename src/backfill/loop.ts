import type postgres from 'postgres'
import type { Config } from '../config/config.js'
import { watchPass } from '../deadline.js'
import type { Logger } from '../logger.js'
import { BackfillError } from './errors.js'
import { type PassDependencies, passLeaseMs, runBackfillPass } from './pass.js'
import type { BackfillReport } from './sweep.js'

export interface BackfillLoop {
  stop(): Promise<void>
}

/** The first pass waits at most this long after start, so a restart catches up soon. */
const FIRST_PASS_MAX_DELAY_MS = 10_000

/**
 * Runs a pass for each source with backfill enabled, every `intervalSeconds`. Every worker process
 * runs the loop; the source's lease lets one pass at a time through, and the others find it held
 * and wait for their next turn. A pass that fails is logged and tried again at the next interval.
 */
export function startBackfill(deps: {
  sql: postgres.Sql
  config: Config
  logger: Logger
  onAccepted: PassDependencies['onAccepted']
  /** Told of every pass's report (the service counts them on /metrics). */
  onReport?: (report: BackfillReport) => void
}): BackfillLoop {
  let stopped = false
  const stopping = new AbortController()
  const timers = new Set<NodeJS.Timeout>()
  const running = new Set<Promise<unknown>>()

  for (const source of deps.config.sources.values()) {
    const backfill = source.backfill
    if (backfill === undefined || !backfill.config.enabled) continue
    const intervalMs = backfill.config.intervalSeconds * 1000
    const log = deps.logger.child({ source: source.config.id, backfill: backfill.provider })
    const schedule = (delayMs: number) => {
      if (stopped) return
      const timer = setTimeout(() => {
        timers.delete(timer)
        const pass = watchPass(
          runBackfillPass(
            {
              sql: deps.sql,
              logger: log,
              signal: stopping.signal,
              ...(deps.onAccepted === undefined ? {} : { onAccepted: deps.onAccepted }),
            },
            source,
          ),
          // A pass waits on the provider's pages and rate limits; past its lease it is stuck.
          { logger: log, loop: 'backfill', stuckAfterMs: passLeaseMs(backfill) },
        )
          .then((report) => deps.onReport?.(report))
          .catch((error: unknown) => {
            if (error instanceof BackfillError && error.code === 'pass_running') {
              log.debug({ err: error }, 'backfill pass skipped: another process runs one')
            } else {
              log.warn({ err: error }, 'backfill pass failed; trying again at the next interval')
            }
          })
          .finally(() => {
            running.delete(pass)
            schedule(intervalMs)
          })
        running.add(pass)
      }, delayMs)
      timers.add(timer)
    }
    schedule(Math.min(intervalMs, FIRST_PASS_MAX_DELAY_MS))
  }

  return {
    async stop() {
      stopped = true
      stopping.abort()
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      await Promise.all(running)
    },
  }
}
