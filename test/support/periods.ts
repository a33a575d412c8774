import type postgres from 'postgres'

// Ledger periods (migration 0018) before today, for tests and benches that seed rows in the past. A
// new ledger has today's period and those ahead only, and a row's period is its id's time
// (`hookledger_uuid_v7(at)`): a row dated on an earlier UTC day with no period fails with "no
// partition of relation "inbound_events" found for row" (the admin search test seeded rows an hour
// back, and so failed in the first hour after midnight UTC).

/** Which UTC days before today get a period. */
export type PastDays<DaysAgo extends readonly number[]> =
  /**
   * The day `n` days before today for each `n`. `today` defaults to the database's; a caller that
   * dates its rows from a `today` of its own passes it, so its periods and its rows stay on the same
   * days when the run crosses midnight.
   */
  | { daysAgo: DaysAgo; today?: Date }
  /** Every day before today that a row dated up to `since` (an interval: '1 hour') ago falls on. */
  | { since: string }

/**
 * One suffix per day asked, in a tuple as long as a literal `daysAgo`: `const [old] = await
 * addPastPeriods(sql, { daysAgo: [40] })` gives `old` as a string, not as string | undefined.
 */
export type PeriodSuffixes<DaysAgo extends readonly number[]> = { [K in keyof DaysAgo]: string }

/**
 * Adds the period of each day of `days` that has none yet, [midnight, next midnight) UTC, and returns
 * every one's suffix (its partitions are `<table>_<suffix>`), added or already there: for `daysAgo`
 * in the order asked, for `since` oldest first.
 */
export async function addPastPeriods<const DaysAgo extends readonly number[] = number[]>(
  sql: postgres.Sql,
  days: PastDays<DaysAgo>,
): Promise<PeriodSuffixes<DaysAgo>> {
  const today =
    'daysAgo' in days && days.today !== undefined
      ? sql`(${days.today.toISOString()}::timestamptz at time zone 'UTC')::date`
      : sql`(now() at time zone 'UTC')::date`
  const daysAgo =
    'daysAgo' in days
      ? sql`select distinct unnest(${[...days.daysAgo]}::int[]) as n`
      : sql`select generate_series(1, ${today} - ((now() - ${days.since}::interval) at time zone 'UTC')::date) as n`
  // Days are dates and their bounds UTC midnights, whatever the session's time zone (an interval
  // '1 day' added to a timestamptz follows its daylight saving time). COALESCE calls the function
  // only for a day whose period is missing: an existing period is kept, not added twice (an error).
  const periods = await sql<Array<{ n: number; suffix: string }>>`
    select n, coalesce(
             (select suffix from ledger_periods where starts = day::timestamp at time zone 'UTC'),
             hookledger_add_ledger_period(day::timestamp at time zone 'UTC',
                                          (day + 1)::timestamp at time zone 'UTC')) as suffix
    from (select n, ${today} - n as day from (${daysAgo}) asked) wanted
    order by n desc`
  if ('since' in days) return periods.map((period) => period.suffix) as PeriodSuffixes<DaysAgo>
  const suffixOf = new Map(periods.map((period) => [period.n, period.suffix]))
  return days.daysAgo.map((n) => suffixOf.get(n)) as PeriodSuffixes<DaysAgo>
}

/** Periods per addPastPeriods call: its one statement locks every partition it attaches. */
const PERIODS_PER_STATEMENT = 30

/** A period for each of the `count` days before today, added PERIODS_PER_STATEMENT at a time. */
export async function addPastDays(sql: postgres.Sql, count: number): Promise<void> {
  for (let first = 1; first <= count; first += PERIODS_PER_STATEMENT) {
    const days = Math.min(PERIODS_PER_STATEMENT, count - first + 1)
    await addPastPeriods(sql, { daysAgo: Array.from({ length: days }, (_, i) => first + i) })
  }
}
