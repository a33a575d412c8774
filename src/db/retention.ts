import type postgres from 'postgres'
import { type Config, DEFAULT_RETENTION_DAYS } from '../config/config.js'
import { DEFAULT_STUCK_AFTER_MS, watchPass } from '../deadline.js'
import { providerRetryHorizonSeconds } from '../inbound/verifiers/index.js'
import type { Logger } from '../logger.js'
import { unsettledPastRetention } from './operation-queries.js'
import type { OperationStatus } from './outbound-schema.js'

export interface Retention {
  /** One pass over every source; returns how many rows it deleted. Exposed for tests. */
  sweep(): Promise<number>
  stop(): Promise<void>
}

/** Operations nothing will run or decide again. The others are owed work or a human's decision. */
const SETTLED_OPERATIONS: OperationStatus[] = ['completed', 'compensated', 'exhausted', 'failed', 'abandoned']

/**
 * Deletes DONE events and conflict records older than their source's `retentionDays`, and settled
 * outbound operations older than `retention.operationDays`, in bounded batches. PENDING, PROCESSING and FAILED events
 * and open operations are never deleted: they are work still owed (or owed a human look). Sources
 * no longer in the config are left alone rather than guessed at.
 */
export function startRetention(deps: {
  sql: postgres.Sql
  config: Config
  logger: Logger
  /** A sweep running this long is logged as stuck (every this long until it ends). */
  stuckAfterMs?: number
}): Retention {
  const { intervalMs, batchSize, operationDays } = deps.config.file.retention
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()

  const sweep = async () => {
    const events = await sweepEvents()
    const operations = await sweepOperations()
    const evidence = await sweepEvidence()
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
    return events + operations + evidence + redeliveries + conflicts
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
    for (const [id, source] of deps.config.sources) {
      for (;;) {
        // SKIP LOCKED: several workers sweeping at once split the rows instead of queueing on them.
        const deleted = await deps.sql`
          delete from inbound_events where id in (
            select id from inbound_events
            where source = ${id} and status = 'done'
              and received_at < now() - ${source.config.retentionDays} * interval '1 day'
            order by received_at
            limit ${batchSize}
            for update skip locked)`
        total += deleted.count
        if (deleted.count < batchSize || stopped) break
      }
    }
    return total
  }

  /**
   * An operation goes with its attempts and approvals (foreign keys) and its audit entries, in one
   * transaction per batch. The audit refuses every other delete (migration 0010); this transaction
   * alone says it is the sweep.
   */
  const sweepOperations = async () => {
    let total = 0
    for (;;) {
      const deleted = await deps.sql.begin(async (tx) => {
        await tx`select set_config('hookledger.retention_sweep', 'on', true)`
        const [row] = await tx<Array<{ operations: number }>>`
          with expired as (
            select id from operations
            where status = any(${SETTLED_OPERATIONS}::operation_status[])
              and updated_at < now() - ${operationDays} * interval '1 day'
            order by updated_at
            limit ${batchSize}
            for update skip locked),
          audit as (delete from operation_audit a using expired e where a.operation_id = e.id),
          deleted as (delete from operations o using expired e where o.id = e.id returning o.id)
          select count(*)::int as operations from deleted`
        return row?.operations ?? 0
      })
      total += deleted
      if (deleted < batchSize || stopped) break
    }
    return total
  }

  /**
   * What providers' events said about operations (operation_evidence), once as old as an expired
   * operation and while no open operation has its key: the evidence that settled an operation, and
   * evidence about one this ledger never saw.
   */
  const sweepEvidence = async () => {
    let total = 0
    for (;;) {
      const deleted = await deps.sql`
        delete from operation_evidence where id in (
          select v.id from operation_evidence v
          where v.received_at < now() - ${operationDays} * interval '1 day'
            and not exists (
              select 1 from operations o
              where o.operation_key = v.operation_key
                and o.status <> all(${SETTLED_OPERATIONS}::operation_status[]))
          order by v.id
          limit ${batchSize}
          for update skip locked)`
      total += deleted.count
      if (deleted.count < batchSize || stopped) break
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
      id,
      keptHours: Math.max(source.config.retentionDays * 24, source.config.backfill?.lookbackHours ?? 0),
    }))
    let total = 0
    for (;;) {
      const deleted = await deps.sql`
        delete from backfill_redeliveries where (source, guid) in (
          select r.source, r.guid from backfill_redeliveries r
          left join unnest(${sources.map((s) => s.id)}::text[], ${sources.map((s) => s.keptHours)}::int[])
            as kept(source, hours) on kept.source = r.source
          where r.requested_at < now() - coalesce(kept.hours, ${DEFAULT_RETENTION_DAYS * 24}) * interval '1 hour'
          limit ${batchSize}
          for update of r skip locked)`
      total += deleted.count
      if (deleted.count < batchSize || stopped) break
    }
    return total
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
      id,
      days: source.config.retentionDays,
    }))
    let total = 0
    for (;;) {
      const deleted = await deps.sql`
        delete from inbound_conflicts where id in (
          select c.id from inbound_conflicts c
          left join unnest(${sources.map((s) => s.id)}::text[], ${sources.map((s) => s.days)}::int[])
            as kept(source, days) on kept.source = c.source
          where c.received_at < now() - coalesce(kept.days, ${DEFAULT_RETENTION_DAYS}) * interval '1 day'
          limit ${batchSize}
          for update of c skip locked)`
      total += deleted.count
      if (deleted.count < batchSize || stopped) break
    }
    return total
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

/**
 * Sources whose retention ends before their provider stops retrying. Retries arrive re-signed with
 * fresh timestamps, so only the ledger row catches them: once it is deleted, a late retry is new.
 */
export function retentionWarnings(config: Config): string[] {
  const warnings: string[] = []
  for (const [id, source] of config.sources) {
    const horizon = providerRetryHorizonSeconds(source.config.verify)
    if (horizon !== null && source.config.retentionDays * 86_400 < horizon) {
      warnings.push(
        `source '${id}': retentionDays ${source.config.retentionDays} is shorter than the ` +
          `${source.config.verify.scheme} retry horizon (${(horizon / 3600).toFixed(1)} h); ` +
          'a retry arriving after its event was deleted would be processed again',
      )
    }
  }
  return warnings
}
