import type postgres from 'postgres'
import type { Config } from '../config/config.js'

export type Severity = 'error' | 'warning'

/** One thing wrong with the ledger or its surroundings, with what to do about it. */
export interface Finding {
  /** Stable, for scripts: `<area>.<what>` (`events.done_unsettled`, `redis.eviction`). */
  code: string
  severity: Severity
  message: string
  fix: string
  /** How many rows (or settings) are affected; `countIsLowerBound` when the bounded scan stopped. */
  count: number
  countIsLowerBound?: boolean
  /** A few of them (row ids, keys, setting values), never payloads or secrets. */
  examples: string[]
}

/** A check that could not run here (no Redis in embedded mode) or did not finish, and why. */
export interface Note {
  check: string
  message: string
}

/** What every check may look at. Checks only read; doctor changes nothing. */
export interface DoctorContext {
  sql: postgres.Sql
  config: Config
  /** Unset: the in-process queue (embedded mode), so the Redis checks are skipped. */
  redisUrl: string | undefined
  /** `needs_reconciliation` older than this is a finding. */
  reconciliationBoundMs: number
  /** An `in_progress` operation whose lease ran out longer ago than this is a finding. */
  leaseMarginMs: number
  /** Rows of a big table a check reads at most (newest first); its counts are then lower bounds. */
  scanLimit: number
  /** How many hookledger processes of each role share this database (for the connection budget). */
  processes: ProcessCounts
  /** Connections each process holds beside its pool (connectionsBesidePool of the ledger's URL). */
  connectionsBesidePool: number
  /** Milliseconds now on this host; tests move it. */
  clock: () => number
}

export interface ProcessCounts {
  all: number
  api: number
  worker: number
}

export interface CheckOutcome {
  findings: Finding[]
  notes: Note[]
}

/** A named check over the ledger (and Redis). */
export interface Check {
  name: string
  run(context: DoctorContext): Promise<CheckOutcome>
}

/** How many examples a finding lists. */
export const EXAMPLES = 5

export const noFindings = (): CheckOutcome => ({ findings: [], notes: [] })
export const found = (...findings: Finding[]): CheckOutcome => ({ findings, notes: [] })

/** A count for a message: "at least N" when the bounded read stopped before the end. */
export const counted = (n: number, bounded: boolean): string => (bounded ? `at least ${n}` : String(n))
