import { Hono } from 'hono'
import { withDeadline } from '../../deadline.js'
import type { Logger } from '../../logger.js'

export interface ReadinessCheck {
  name: string
  check: () => Promise<unknown>
  /** What /readyz shows when the check passes; 'ok' unless set (the in-process queue says so). */
  ok?: string
}

const CHECK_TIMEOUT_MS = 2000

/**
 * `/healthz`: the process answers. `/readyz`: its stores answer too, so a balancer can route to it.
 * Both are anonymous, so a failing check shows only its name: the driver's text (host names, user
 * names, "password authentication failed …") goes to the log, never to the caller.
 */
export function healthRoutes(checks: readonly ReadinessCheck[], logger: Logger) {
  return new Hono()
    .get('/healthz', (c) => c.json({ status: 'ok' }))
    .get('/readyz', async (c) => {
      const results = await Promise.all(
        checks.map(async ({ name, check, ok }) => {
          try {
            await withDeadline(check(), CHECK_TIMEOUT_MS, `no answer within ${CHECK_TIMEOUT_MS} ms`)
            return [name, ok ?? 'ok', true] as const
          } catch (error) {
            logger.warn({ err: error, check: name }, `readiness check '${name}' failed`)
            return [name, 'unavailable', false] as const
          }
        }),
      )
      const ready = results.every(([, , passed]) => passed)
      return c.json(
        {
          status: ready ? 'ready' : 'unavailable',
          checks: Object.fromEntries(results.map(([name, result]) => [name, result])),
        },
        ready ? 200 : 503,
      )
    })
}
