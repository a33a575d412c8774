import type postgres from 'postgres'
import type { RowIdRange } from './row-id-range.js'

// A generic plan of a statement on a partitioned table locks every partition of it before it prunes
// them (PostgreSQL 15), whatever its bounds (row-id-range.ts): on a 30-day ledger of daily periods
// the worker's lease, which reads inbound_events three times and the payloads once, locked 136
// partitions per batch, and the settle and the enqueue mark 34 each. A batch of recent events falls
// in one period, and the period of a row id is its first 48 bits, the milliseconds of its claim: so
// such a batch names that period's partitions themselves, and locks those only. A batch that spans
// periods, or falls in one this process does not know yet, names the parents as before. Updating a
// row through its partition is the same update: the row's id, its partition key, never changes.

/** The ledger's tables partitioned by period whose statements name a period's partition. */
export type PeriodTable = 'inbound_events' | 'inbound_event_payloads'

/** PostgreSQL's code for a relation that does not exist: a named partition whose period was dropped. */
const UNDEFINED_TABLE = '42P01'

/** How often, at most, the periods are read again when an id falls in none this process knows. */
const REREAD_AFTER_MS = 5000

interface KnownPeriod {
  startsMs: number
  endsMs: number
  suffix: string
}

export interface PeriodTables {
  /**
   * Runs `statement` with `<table>_<suffix>` for each table when every id of `ids` falls in one
   * period this process knows (or there is no id), else with the parents; and once more with the parents when a named
   * partition is gone (retention dropped its period since the periods were read). Waits for the
   * periods at its first run only: later, an id in none it knows has them read again in the
   * background.
   */
  run<T>(ids: RowIdRange, statement: (tableOf: (table: PeriodTable) => string) => Promise<T>): Promise<T>
}

/** The milliseconds of a version-7 row id: its first 12 hex digits. */
function rowIdMs(id: string): number {
  return Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16)
}

const byPool = new WeakMap<postgres.Sql, PeriodTables>()

/**
 * The periods of the ledger a pool reaches, read at first use and again when an id falls outside
 * them: one reading per pool, shared by its lease and settle.
 */
export function periodTablesOf(sql: postgres.Sql): PeriodTables {
  let tables = byPool.get(sql)
  if (tables === undefined) {
    tables = periodTables(sql)
    byPool.set(sql, tables)
  }
  return tables
}

function periodTables(sql: postgres.Sql): PeriodTables {
  let periods: readonly KnownPeriod[] = []
  let readAt = Number.NEGATIVE_INFINITY
  let reading: Promise<void> | undefined
  const readAgain = () => {
    if (reading !== undefined || Date.now() - readAt < REREAD_AFTER_MS) return
    readAt = Date.now()
    reading = sql<Array<{ starts_ms: string; ends_ms: string; suffix: string }>>`
      select (extract(epoch from starts) * 1000)::bigint::text as starts_ms,
             (extract(epoch from ends) * 1000)::bigint::text as ends_ms, suffix
      from ledger_periods order by starts`
      .then(
        (rows) => {
          periods = rows.map((row) => ({
            startsMs: Number(row.starts_ms),
            endsMs: Number(row.ends_ms),
            suffix: row.suffix,
          }))
        },
        // The parents serve meanwhile; the next id outside the known periods tries again.
        () => {},
      )
      .finally(() => {
        reading = undefined
      })
  }
  const periodOf = (ids: RowIdRange): KnownPeriod | undefined => {
    // No id (a settle of operations only): the statement names no row of the table, so any one
    // period's partition serves, and locks one instead of all.
    if (ids.lowest === null || ids.highest === null) return periods.at(-1)
    const lowest = rowIdMs(ids.lowest)
    const highest = rowIdMs(ids.highest)
    const period = periods.find((known) => known.startsMs <= lowest && lowest < known.endsMs)
    if (period === undefined || highest >= period.endsMs) {
      if (period === undefined) readAgain()
      return undefined
    }
    return period
  }
  return {
    async run(ids, statement) {
      if (readAt === Number.NEGATIVE_INFINITY) readAgain()
      if (periods.length === 0) await reading
      const period = periodOf(ids)
      if (period === undefined) return statement((table) => table)
      try {
        return await statement((table) => `${table}_${period.suffix}`)
      } catch (error) {
        if ((error as { code?: unknown }).code !== UNDEFINED_TABLE) throw error
        periods = periods.filter((known) => known !== period)
        return statement((table) => table)
      }
    },
  }
}
