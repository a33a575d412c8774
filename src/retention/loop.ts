import type postgres from 'postgres'
import { type Config, DEFAULT_RETENTION_DAYS } from '../config/config.js'
import { GENERIC_PLAN_MAX_PERIODS } from '../db/client.js'
import { ledgerPeriodsHeld } from '../db/ledger-periods.js'
import { unsettledPastRetention } from '../db/operation-queries.js'
import {
  deleteDoneEvents,
  deleteExpiredConflicts,
  deleteExpiredRedeliveries,
  deleteSettledEvidence,
  deleteSettledOperations,
} from '../db/retention.js'
import { DEFAULT_STUCK_AFTER_MS, watchPass } from '../deadline.js'
import type { Logger } from '../logger.js'
import { keepPartitions, periodKeepDays, usesGenericPlans } from './partitions.js'

export interface Retention {
  /** One pass over every source; returns how many rows and whole periods it removed. Exposed for tests. */
  sweep(): Promise<number>
  stop(): Promise<void>
}

/**
 * Drops whole ledger periods once every source's `retentionDays` has passed (src/retention/
 * partitions.ts), then deletes the DONE events and conflict records that remain past their source's
 * `retentionDays`, and settled outbound operations older than `retention.operationDays`, in bounded
 * batches. PENDING, PROCESSING and FAILED events and open operations are never deleted: they are
 * work still owed (or owed a human look), and a period holding one is kept. The row sweep leaves
 * sources no longer in the config alone rather than guessing at them; a dropped period takes their
 * events with everyone else's.
 */
export function startRetention(deps: {
  sql: postgres.Sql
  config: Config
  logger: Logger
  /** A sweep running this long is logged as stuck (every this long until it ends). */
  stuckAfterMs?: number
  /** Whether this process opened generic-plan connections at start (openLedger's `genericPlans`). */
  genericPlans?: boolean
}): Retention {
  const { intervalMs, batchSize, operationDays } = deps.config.file.retention
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()

  /** Deletes batch after batch until one comes back short (nothing older is left) or the loop stops. */
  const drain = async (deleteBatch: () => Promise<number>) => {
    let total = 0
    for (;;) {
      const deleted = await deleteBatch()
      total += deleted
      if (deleted < batchSize || stopped) return total
    }
  }

  const sweep = async () => {
    // Whole periods first: the row sweep below then finds only what they could not take.
    const periods = await keepPartitions(deps.sql, deps.config, deps.logger)
    if (deps.genericPlans === true) await warnOfGenericPlanLocks()
    const events = await sweepEvents()
    // An operation goes with its attempts, approvals and audit entries.
    const operations = await drain(() =>
      deleteSettledOperations(deps.sql, { days: operationDays, limit: batchSize }),
    )
    // What providers' events said about operations, once as old as an expired operation and while
    // no open operation has its key.
    const evidence = await drain(() =>
      deleteSettledEvidence(deps.sql, { days: operationDays, limit: batchSize }),
    )
    const redeliveries = await sweepRedeliveries()
    const conflicts = await sweepConflicts()
    if (events > 0) deps.logger.info({ deleted: events }, 'retention deleted expired DONE events')
    if (operations + evidence > 0) {
      deps.logger.info({ operations, evidence }, 'retention deleted expired operations and evidence')
    }
    if (redeliveries > 0) {
      deps.logger.info({ deleted: redeliveries }, 'retention deleted expired redelivery requests')
    }
    if (conflicts > 0) deps.logger.info({ deleted: conflicts }, 'retention deleted expired conflict records')
    await reportUnsettled()
    return periods + events + operations + evidence + redeliveries + conflicts
  }

  /**
   * A process decides at start whether its batched statements keep generic plans (usesGenericPlans),
   * and keeps that decision. Periods held past retention for their unfinished events can pile up
   * after it, and each such statement then locks every one of them, in the server's lock table that
   * all sessions share: said at every pass until a restart decides again.
   */
  const warnOfGenericPlanLocks = async () => {
    const periodsHeld = await ledgerPeriodsHeld(deps.sql)
    if (usesGenericPlans(deps.config, periodsHeld)) return
    deps.logger.warn(
      { periodsHeld, most: GENERIC_PLAN_MAX_PERIODS },
      "the ledger holds more periods than a generic plan should lock, and this process's batched statements " +
        'keep generic plans, which lock every period: restart it to plan them at each call, or replay or ' +
        'finish the unfinished events that keep old periods (/admin)',
    )
  }

  /**
   * Open operations are never deleted, however old: each is owed a retry, a reconciliation or a
   * person's decision. Past operationDays that debt is said once per pass (and on /metrics as
   * hookledger_operations_unsettled_past_retention), so it is not kept forever in silence.
   */
  const reportUnsettled = async () => {
    const rows = await unsettledPastRetention(deps.sql, operationDays)
    const total = rows.reduce((sum, row) => sum + row.n, 0)
    if (total === 0) return
    deps.logger.warn(
      {
        operations: total,
        byStatus: Object.fromEntries(rows.map((row) => [row.status, row.n])),
        olderThanDays: operationDays,
      },
      'operations unsettled for longer than retention.operationDays are kept until settled: reconcile, decide or abandon them (/admin/operations)',
    )
  }

  const sweepEvents = async () => {
    let total = 0
    const keepDays = periodKeepDays(deps.config)
    for (const [id, source] of deps.config.sources) {
      const days = source.config.retentionDays
      total += await drain(() =>
        deleteDoneEvents(deps.sql, { source: id, days, limit: batchSize, wholePeriods: days >= keepDays }),
      )
    }
    return total
  }

  /**
   * The GitHub redeliveries a backfill asked for (backfill_redeliveries), kept as long as the source's
   * DONE events and never less than its lookback: a sweep consults them only for deliveries in its
   * window, and past the events' retention the ledger no longer knows those deliveries anyway. A
   * source removed from the config keeps them for the default retention, not forever.
   */
  const sweepRedeliveries = async () => {
    const sources = [...deps.config.sources].map(([id, source]) => ({
      source: id,
      hours: Math.max(source.config.retentionDays * 24, source.config.backfill?.lookbackHours ?? 0),
    }))
    return drain(() =>
      deleteExpiredRedeliveries(deps.sql, {
        sources,
        otherHours: DEFAULT_RETENTION_DAYS * 24,
        limit: batchSize,
      }),
    )
  }

  /**
   * The record of each delivery that reused an event id with another body (inbound_conflicts): it is
   * evidence about the source's events, kept as long as they are (the source's retentionDays; a
   * source no longer configured, the default retention). Nothing else deletes these rows, and a
   * provider that keeps sending changed copies (a backfill list going round in circles, once) would
   * otherwise grow the table for ever.
   */
  const sweepConflicts = async () => {
    const sources = [...deps.config.sources].map(([id, source]) => ({
      source: id,
      days: source.config.retentionDays,
    }))
    return drain(() =>
      deleteExpiredConflicts(deps.sql, { sources, otherDays: DEFAULT_RETENTION_DAYS, limit: batchSize }),
    )
  }

  const loop = () => {
    if (stopped) return
    running = watchPass(sweep(), {
      logger: deps.logger,
      loop: 'retention',
      stuckAfterMs: deps.stuckAfterMs ?? DEFAULT_STUCK_AFTER_MS,
    })
      .catch((error: unknown) => deps.logger.warn({ err: error }, 'retention sweep failed; retrying later'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, intervalMs)
      })
  }
  timer = setTimeout(loop, Math.min(intervalMs, 60_000))

  return {
    sweep,
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}
