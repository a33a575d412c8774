import type postgres from 'postgres'
import type { Config } from '../config/config.js'
import {
  failedEventsBySource,
  pendingBacklog,
  staleApprovals,
  staleReconciliations,
  stuckBackfills,
  unfinishedAtLeast,
  unqueuedEvents,
} from '../db/alert-queries.js'
import { listDisabledRoutes } from '../db/event-routes.js'
import { DEFAULT_STUCK_AFTER_MS, watchPass } from '../deadline.js'
import type { CircuitView, Destination } from '../delivery/guard.js'
import type { Logger } from '../logger.js'
import { stepKey } from '../outbound/keys.js'
import type { OutboundLedger } from '../outbound/ledger.js'
import { type Alert, alertTool } from './channels.js'

export interface AlertMonitor {
  /**
   * Raises an alert now (a route just disabled, a circuit just opened) on every channel. Sent at
   * most once per condition, subject and window, by whichever process gets there first.
   */
  notify(alert: Omit<Alert, 'link'> & { path: string }): void
  /** Starts the periodic check of the conditions the ledger and the destinations' circuits answer. */
  start(circuits: { destinations: readonly Destination[]; circuit(id: string): Promise<CircuitView> }): void
  stop(): Promise<void>
}

/**
 * Alerts that reach a person: each one an operation of the outbound ledger, keyed by channel,
 * condition, subject and window, so it is sent once with the ledger's retries, and a lost answer is
 * resent under the same `webhook-id`. A send that ran out of retries is tried again at the next
 * check of the same window.
 */
export function createAlertMonitor(deps: {
  config: Config
  sql: postgres.Sql
  outbound: OutboundLedger
  logger: Logger
  /** A check running this long is logged as stuck (every this long until it ends). */
  stuckAfterMs?: number
}): AlertMonitor {
  const settings = deps.config.file.alerts
  const channels = deps.config.alertChannels
  const inFlight = new Set<Promise<void>>()
  let timer: NodeJS.Timeout | undefined
  let stopped = false

  const notify: AlertMonitor['notify'] = ({ path, ...alert }) => {
    if (channels.length === 0 || stopped) return
    const windowIndex = Math.floor(Date.now() / settings.windowMs)
    const windowStart = new Date(windowIndex * settings.windowMs)
    const windowEnd = new Date((windowIndex + 1) * settings.windowMs)
    const full: Alert = { ...alert, link: `${settings.adminUrl?.replace(/\/$/, '') ?? ''}${path}` }
    for (const channel of channels) {
      const args = {
        channel: channel.id,
        condition: alert.condition,
        subject: alert.subject,
        windowStart: windowStart.toISOString(),
      }
      const key = stepKey(
        ['alerts', channel.id, alert.condition, alert.subject, windowLabel(windowStart)],
        'send',
      )
      const sent = deps.outbound
        .invoke(alertTool(channel, full, windowEnd), { key, args })
        .then((outcome) => {
          if (outcome.kind === 'completed' && !outcome.replayed) {
            deps.logger.info(
              { channel: channel.id, condition: alert.condition, subject: alert.subject },
              'alert sent',
            )
          } else if (outcome.kind === 'exhausted' || outcome.kind === 'failed') {
            deps.logger.warn(
              { channel: channel.id, condition: alert.condition, error: outcome.error },
              'alert not delivered; trying again at the next check',
            )
          }
        })
        .catch((error: unknown) =>
          deps.logger.warn({ err: error, channel: channel.id }, 'alert could not be recorded'),
        )
        .finally(() => inFlight.delete(sent))
      inFlight.add(sent)
    }
  }

  const check = async (circuits: Parameters<AlertMonitor['start']>[0]) => {
    const conditions = settings.conditions
    const window = describeMs(settings.windowMs)
    if (conditions.eventFailed) {
      for (const row of await failedEventsBySource(deps.sql, settings.windowMs)) {
        notify({
          condition: 'event_failed',
          subject: row.source,
          summary: `${row.n} event(s) of source '${row.source}' FAILED in the last ${window}. Latest error: ${row.last_error ?? 'none recorded'}`,
          path: `/admin/events?source=${encodeURIComponent(row.source)}&status=failed`,
          details: { failed: row.n },
        })
      }
    }
    if (conditions.routeDisabled) {
      for (const row of await listDisabledRoutes(deps.sql)) {
        notify(routeDisabledAlert(row.source, row.routeId, row.reason))
      }
    }
    if (conditions.circuitOpen) {
      for (const destination of circuits.destinations) {
        const view = await circuits.circuit(destination.id)
        if (view.state !== 'closed') notify(circuitOpenAlert(destination.id, view.openUntil))
      }
    }
    if (conditions.backfillStuck) {
      // Read from the ledger, so a pass run by hand (`hookledger backfill`) alerts like the loop's.
      for (const row of await stuckBackfills(deps.sql, settings.windowMs)) {
        notify({
          condition: 'backfill_stuck',
          subject: row.source,
          summary: `Backfill of source '${row.source}' is stuck: its last pass stopped with ${row.last_error ?? row.last_error_code}. Every pass will stop there until the provider or the config changes.`,
          path: `/admin/events?source=${encodeURIComponent(row.source)}`,
          details: { source: row.source, code: row.last_error_code },
        })
      }
    }
    if (conditions.needsReconciliationMs !== null) {
      const stale = await staleReconciliations(deps.sql, conditions.needsReconciliationMs)
      if (stale.count > 0) {
        notify({
          condition: 'needs_reconciliation',
          subject: 'operations',
          summary: `${stale.count} operation(s) have an unknown outcome (needs_reconciliation) for over ${describeMs(conditions.needsReconciliationMs)}; the oldest is ${stale.oldestKey}`,
          path: '/admin/operations?status=needs_reconciliation',
          details: { operations: stale.count },
        })
      }
    }
    if (conditions.approvalWaitingMs !== null) {
      const waiting = await staleApprovals(deps.sql, conditions.approvalWaitingMs)
      if (waiting > 0) {
        notify({
          condition: 'approval_waiting',
          subject: 'approvals',
          summary: `${waiting} approval(s) have waited for a decision for over ${describeMs(conditions.approvalWaitingMs)}`,
          path: '/admin/approvals',
          details: { approvals: waiting },
        })
      }
    }
    const maxBacklog = deps.config.file.server.backpressure.maxBacklog
    if (conditions.backpressure && maxBacklog !== null && (await unfinishedAtLeast(deps.sql, maxBacklog))) {
      notify({
        condition: 'backpressure',
        subject: 'events',
        summary: `${maxBacklog} or more events are unfinished (server.backpressure.maxBacklog): new deliveries and agents' claims are refused with 429 until the workers catch up`,
        path: '/admin/events?status=pending',
        details: { maxBacklog },
      })
    }
    if (conditions.pendingBacklog !== null || conditions.oldestPendingMs !== null) {
      const backlog = await pendingBacklog(deps.sql)
      if (conditions.pendingBacklog !== null && backlog.count > conditions.pendingBacklog) {
        notify({
          condition: 'pending_backlog',
          subject: 'events',
          summary: `${backlog.count} events are PENDING (over ${conditions.pendingBacklog}): the workers are behind`,
          path: '/admin/events?status=pending',
          details: { pending: backlog.count },
        })
      }
      if (conditions.oldestPendingMs !== null && backlog.oldestMs > conditions.oldestPendingMs) {
        notify({
          condition: 'oldest_pending',
          subject: 'events',
          summary: `The oldest PENDING event has waited ${describeMs(backlog.oldestMs)} (over ${describeMs(conditions.oldestPendingMs)})`,
          path: '/admin/events?status=pending',
          details: { oldestPendingMs: Math.round(backlog.oldestMs) },
        })
      }
    }
    if (conditions.unqueuedEvents !== null) {
      const unqueued = await unqueuedEvents(deps.sql, deps.config.file.relay.graceMs)
      if (unqueued > conditions.unqueuedEvents) {
        notify({
          condition: 'events_unqueued',
          subject: 'queue',
          summary: `${unqueued} committed events have no job in Redis (over ${conditions.unqueuedEvents}): Redis is down or refuses writes (OOM). They are safe in the ledger and the relay enqueues them once Redis takes writes; see /readyz and the log`,
          path: '/admin/events?status=pending',
          details: { unqueued },
        })
      }
    }
  }

  return {
    notify,
    start(circuits) {
      if (channels.length === 0) return
      const tick = () => {
        timer = setTimeout(async () => {
          try {
            await watchPass(check(circuits), {
              logger: deps.logger,
              loop: 'alerts',
              stuckAfterMs: deps.stuckAfterMs ?? DEFAULT_STUCK_AFTER_MS,
            })
          } catch (error) {
            deps.logger.warn({ err: error }, 'alert conditions could not be checked; trying again')
          }
          if (!stopped) tick()
        }, settings.checkIntervalMs)
        timer.unref()
      }
      tick()
    },
    async stop() {
      stopped = true
      clearTimeout(timer)
      await Promise.all(inFlight)
    },
  }
}

export function routeDisabledAlert(source: string, routeId: string, reason: string) {
  return {
    condition: 'route_disabled' as const,
    subject: `${source}/${routeId}`,
    summary: `Route ${source}/${routeId} is disabled: ${reason}. Its deliveries wait until a person re-enables it.`,
    path: '/admin/routes',
    details: { source, route: routeId, reason },
  }
}

export function circuitOpenAlert(destinationId: string, openUntil: Date | null) {
  return {
    condition: 'circuit_open' as const,
    subject: destinationId,
    summary: `The circuit of ${destinationId} is open: its deliveries wait${openUntil === null ? '' : ` until ${openUntil.toISOString()} at least`}`,
    path: '/admin/routes',
    details: { destination: destinationId },
  }
}

/** `20261203T140000Z`: a window's start as a key part, readable in the operations list. */
function windowLabel(start: Date): string {
  return start.toISOString().replace(/[-:]|\.\d+/g, '')
}

function describeMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`
  return `${Math.round(ms / 3_600_000)} h`
}
