import { Hono } from 'hono'
import { withDeadline } from '../../deadline.js'
import type { Logger } from '../../logger.js'

/** A check that passes with a problem worth naming: /readyz still answers 200, with status `degraded`. */
export interface Degraded {
  degraded: string
}

export interface ReadinessCheck {
  name: string
  /** Throws: not ready (503). Resolves to a `Degraded`: ready, and the problem is named. */
  check: () => Promise<unknown>
  /** What /readyz shows when the check passes; 'ok' unless set (the in-process queue says so). */
  ok?: string
  /**
   * When the check fails (throws, or no answer in time): the problem to name while staying ready
   * (200, `degraded`), or undefined for not ready (503). Unset: a failure is always 503.
   */
  degradedWhenFailing?: () => string | undefined
}

/** Thrown by a check to be not ready with a problem it names itself (fixed text, never a driver's). */
export class NotReady extends Error {
  constructor(readonly shown: string) {
    super(shown)
  }
}

const CHECK_TIMEOUT_MS = 2000

function isDegraded(value: unknown): value is Degraded {
  return typeof value === 'object' && value !== null && typeof (value as Degraded).degraded === 'string'
}

/**
 * `/healthz`: the process answers. `/readyz`: its stores answer too, so a balancer can route to it.
 * Both are anonymous, so a failing check shows only its name: the driver's text (host names, user
 * names, "password authentication failed …") goes to the log, never to the caller. A degraded check,
 * or one that throws NotReady, shows the fixed text the check made itself (an evicting Redis, a
 * read-only ledger), never a driver's.
 */
export function healthRoutes(checks: readonly ReadinessCheck[], logger: Logger) {
  return new Hono()
    .get('/healthz', (c) => c.json({ status: 'ok' }))
    .get('/readyz', async (c) => {
      const results = await Promise.all(
        checks.map(async ({ name, check, ok, degradedWhenFailing }) => {
          try {
            const value = await withDeadline(
              check(),
              CHECK_TIMEOUT_MS,
              `no answer within ${CHECK_TIMEOUT_MS} ms`,
            )
            if (isDegraded(value)) return [name, value.degraded, 'degraded'] as const
            return [name, ok ?? 'ok', 'ok'] as const
          } catch (error) {
            logger.warn({ err: error, check: name }, `readiness check '${name}' failed`)
            const degraded = degradedWhenFailing?.()
            if (degraded !== undefined) return [name, degraded, 'degraded'] as const
            return [name, error instanceof NotReady ? error.shown : 'unavailable', 'unavailable'] as const
          }
        }),
      )
      const ready = results.every(([, , verdict]) => verdict !== 'unavailable')
      const degraded = results.some(([, , verdict]) => verdict === 'degraded')
      return c.json(
        {
          status: ready ? (degraded ? 'degraded' : 'ready') : 'unavailable',
          checks: Object.fromEntries(results.map(([name, result]) => [name, result])),
        },
        ready ? 200 : 503,
      )
    })
}
