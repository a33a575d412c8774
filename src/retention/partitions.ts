import type postgres from 'postgres'
import { type Config, DEFAULT_RETENTION_DAYS } from '../config/config.js'
import { GENERIC_PLAN_MAX_PERIODS } from '../db/client.js'
import {
  dropExpiredKeyGenerations,
  dropExpiredPeriods,
  extendLedgerPartitions,
} from '../db/ledger-periods.js'
import type { Logger } from '../logger.js'

/**
 * How far ahead of now the ledger's partitions are made. A claim needs the partition of its own
 * time: two days let a keeper that failed (a lock it could not get, a restart) try many times
 * before any claim finds none.
 */
export const PARTITIONS_AHEAD_DAYS = 2

/**
 * The longest retentionDays of any source: a period is dropped whole only once all of them passed.
 * A config with no source keeps periods for the default, not for a day: the events of the sources
 * taken out of it are still there.
 */
export function periodKeepDays(config: Config): number {
  const days = [...config.sources.values()].map((source) => source.config.retentionDays)
  return days.length === 0 ? DEFAULT_RETENTION_DAYS : Math.max(...days)
}

const PERIOD_DAYS = { day: 1, week: 7 } as const

/**
 * How many periods the ledger holds once retention runs: those ending within periodKeepDays, the
 * current one, and those made ahead. A period kept past retention for its unfinished events is not
 * counted: it is the exception retention warns about.
 */
export function ledgerPeriodsKept(config: Config): number {
  const days = PERIOD_DAYS[config.file.retention.partitionPeriod]
  return Math.ceil(periodKeepDays(config) / days) + 1 + Math.ceil(PARTITIONS_AHEAD_DAYS / days)
}

/**
 * Whether the worker's batched statements keep generic plans (openLedger's `genericPlans`): only on
 * a ledger of at most GENERIC_PLAN_MAX_PERIODS periods, since such a plan locks every period. Both
 * counts matter: the periods the config keeps, and those the ledger holds (`periodsHeld`, read at
 * start: periods kept past retention for their unfinished events, or kept by an earlier config).
 */
export function usesGenericPlans(config: Config, periodsHeld: number): boolean {
  return Math.max(ledgerPeriodsKept(config), periodsHeld) <= GENERIC_PLAN_MAX_PERIODS
}

/** Makes the periods and key generations the next PARTITIONS_AHEAD_DAYS need (start-up, each pass). */
export async function extendPartitions(sql: postgres.Sql, config: Config, logger: Logger): Promise<void> {
  const { partitionPeriod, dedupWindowDays } = config.file.retention
  const added = await extendLedgerPartitions(sql, {
    period: partitionPeriod,
    dedupWindowDays,
    aheadDays: PARTITIONS_AHEAD_DAYS,
  })
  if (added.periods.length + added.generations.length > 0) {
    logger.info(added, 'ledger partitions added')
  }
}

/**
 * One pass of the partition keeper: periods ahead, then the expired periods and key generations
 * dropped whole. Returns the number of periods dropped. A period kept for its unfinished events is
 * said on every pass, as unsettled operations are: it is work still owed.
 */
export async function keepPartitions(sql: postgres.Sql, config: Config, logger: Logger): Promise<number> {
  await extendPartitions(sql, config, logger)
  const periods = await dropExpiredPeriods(sql, { keepDays: periodKeepDays(config) })
  const dropped = periods.filter((period) => period.dropped)
  if (dropped.length > 0) {
    logger.info(
      { periods: dropped.map((period) => period.suffix) },
      'retention dropped expired ledger periods',
    )
  }
  const failed = periods.filter((period) => period.error !== undefined)
  if (failed.length > 0) {
    logger.warn(
      { periods: failed.map((period) => ({ period: period.suffix, error: period.error })) },
      'ledger periods past retention could not be dropped this pass; the next pass finishes them',
    )
  }
  const held = periods.filter((period) => !period.dropped && period.error === undefined)
  if (held.length > 0) {
    logger.warn(
      { periods: held.map((period) => ({ period: period.suffix, unfinished: period.unfinished })) },
      'ledger periods past retention are kept for their PENDING, PROCESSING or FAILED events: replay or ' +
        'finish them (/admin); their DONE events are deleted row by row meanwhile',
    )
  }
  const generations = await dropExpiredKeyGenerations(sql, {
    dedupWindowDays: config.file.retention.dedupWindowDays,
  })
  if (generations.length > 0) logger.info({ generations }, 'retention dropped expired dedup key generations')
  return dropped.length
}
