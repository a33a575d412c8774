// The partitions of the inbound ledger are ranges of row ids (version-7 UUIDs, time first; migration
// 0018). A statement that joins inbound_events, or a table partitioned with it, to an array of ids
// (`from unnest(ids) … where e.id = i.id`) cannot tell from the join which partitions it needs, so
// PostgreSQL plans, opens and locks every period's partition for it, and a 30-day ledger has 34 of
// them. The lowest and highest id of the array, written as `e.id between lowest and highest`,
// prunes them when the statement is planned: a batch of recent events spans one period or two.
// bench/per-event-cost.ts with COST_PAST_DAYS=31 measured the enqueue mark alone at 538 µs of
// server time per event without the bounds, against 44 with 3 periods.

/** The lowest and highest of `ids` as PostgreSQL orders uuids; both null when there is none. */
export interface RowIdRange {
  lowest: string | null
  highest: string | null
}

/**
 * `ids` (uuids, as text) bounded: lowercase hex with its dashes in fixed places orders as
 * PostgreSQL's bytewise uuid order does. Nulls in `ids` are skipped.
 */
export function rowIdRange(ids: ReadonlyArray<string | null | undefined>): RowIdRange {
  let lowest: string | null = null
  let highest: string | null = null
  for (const id of ids) {
    if (id === null || id === undefined) continue
    const text = id.toLowerCase()
    if (lowest === null || text < lowest) lowest = text
    if (highest === null || text > highest) highest = text
  }
  return { lowest, highest }
}
