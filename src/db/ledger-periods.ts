import type postgres from 'postgres'
import { KEY_GENERATION_OVERLAP } from './claims.js'
import { openSingleConnection } from './client.js'

// The partitions of the inbound ledger (migration 0018): periods of inbound_events and the five
// tables that grow with it, and generations of inbound_event_keys, the claim's arbiter. Made ahead
// of time and dropped whole by the partition keeper (src/retention/partitions.ts).

export type PartitionPeriod = 'day' | 'week'

/** One transaction at a time adds or drops partitions, whatever the number of processes. */
const KEEPER_LOCK = `hashtext('hookledger:ledger-periods')`

/**
 * Partitions are made as tables of their own, then attached: a SHARE UPDATE EXCLUSIVE lock on the
 * parent, which no claim or handler waits for, but which waits for an index build or a VACUUM FULL.
 * Waiting longer, the keeper gives up and tries on its next pass: partitions are made days ahead.
 */
const PARTITION_LOCK_TIMEOUT = '2s'

export interface ExtendResult {
  /** Suffixes of the periods added. */
  periods: string[]
  /** Suffixes of the key generations added. */
  generations: string[]
}

/**
 * Adds periods (each `period` long, aligned to UTC midnight or Monday) until they reach `aheadDays`
 * past now, and key generations (`dedupWindowDays` each) until they do. A ledger down longer than
 * that gets the periods it missed as well, so every id a claim can make has a partition.
 */
export async function extendLedgerPartitions(
  sql: postgres.Sql,
  options: { period: PartitionPeriod; dedupWindowDays: number; aheadDays: number },
): Promise<ExtendResult> {
  const result = await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${tx.unsafe(KEEPER_LOCK)})`
    await tx`select set_config('lock_timeout', ${PARTITION_LOCK_TIMEOUT}, true)`
    const periods = await addRangesAhead(tx, {
      registry: 'ledger_periods',
      add: 'hookledger_add_ledger_period',
      endAfter: (starts) => boundaryAfter(tx, options.period, starts),
      aheadDays: options.aheadDays,
    })
    const generations = await addRangesAhead(tx, {
      registry: 'inbound_key_generations',
      add: 'hookledger_add_key_generation',
      endAfter: (starts) => tx`${starts} + ${options.dedupWindowDays} * interval '1 day'`,
      aheadDays: options.aheadDays,
    })
    return { periods, generations }
  })
  return result as ExtendResult
}

/**
 * Adds ranges to a registry, each from the end of the last one (or today) to `endAfter` its start,
 * with `add` (migration 0018's function that makes and attaches its partitions), until they reach
 * `aheadDays` past now. Returns the suffixes added.
 */
async function addRangesAhead(
  tx: postgres.TransactionSql,
  range: {
    registry: 'ledger_periods' | 'inbound_key_generations'
    add: 'hookledger_add_ledger_period' | 'hookledger_add_key_generation'
    endAfter: (starts: postgres.PendingQuery<postgres.Row[]>) => postgres.PendingQuery<postgres.Row[]>
    aheadDays: number
  },
): Promise<string[]> {
  const rows = await tx<Array<{ suffix: string }>>`
    with recursive last as (
      select coalesce(max(ends), date_trunc('day', now(), 'UTC')) as ends from ${tx(range.registry)}),
    wanted as (
      select ends as starts, ${range.endAfter(tx`ends`)} as ends from last
      where ends < now() + ${range.aheadDays} * interval '1 day'
      union all
      select ends, ${range.endAfter(tx`ends`)} from wanted
      where ends < now() + ${range.aheadDays} * interval '1 day')
    select ${tx.unsafe(range.add)}(starts, ends) as suffix from wanted order by starts`
  return rows.map((row) => row.suffix)
}

/** The first UTC day or week boundary after `at`. */
function boundaryAfter(
  sql: postgres.TransactionSql,
  period: PartitionPeriod,
  at: postgres.PendingQuery<postgres.Row[]>,
) {
  return period === 'day'
    ? sql`date_trunc('day', ${at}, 'UTC') + interval '1 day'`
    : sql`date_trunc('week', ${at}, 'UTC') + interval '1 week'`
}

export interface PeriodDrop {
  suffix: string
  /** Events in it that are not DONE: the period was kept for them (none when it was dropped). */
  unfinished: number
  dropped: boolean
  /** Why the drop stopped half-way (another worker's pass detaching it too, a timeout); the next pass finishes it. */
  error?: string
}

/** The six tables of a period, events first (hookledger_ledger_tables() in migration 0018). */
export const LEDGER_TABLES = [
  'inbound_events',
  'inbound_event_payloads',
  'event_attempts',
  'event_replays',
  'event_routes',
  'event_ordering_keys',
] as const

const UNFINISHED = ['pending', 'processing', 'failed'] as const

/**
 * Drops, oldest first, every period that ended more than `keepDays` ago and holds no event that is
 * PENDING, PROCESSING or FAILED (dropPeriod). A period holding unfinished events is kept (retention's
 * row sweep still deletes its DONE rows) and returned with their count.
 */
export async function dropExpiredPeriods(
  sql: postgres.Sql,
  options: { keepDays: number },
): Promise<PeriodDrop[]> {
  const expired = await sql<Array<{ suffix: string }>>`
    select suffix from ledger_periods
    where ends < now() - ${options.keepDays} * interval '1 day'
    order by starts`
  const outcomes: PeriodDrop[] = []
  for (const { suffix } of expired) {
    try {
      outcomes.push(await dropPeriod(sql, suffix))
    } catch (error) {
      outcomes.push({ suffix, unfinished: 0, dropped: false, error: String((error as Error).message) })
    }
  }
  return outcomes
}

/**
 * Drops one period's six partitions whole, so retention writes no dead tuple and takes the same time
 * for a thousand rows as for millions, unless its events are not all DONE. Each table is first
 * detached CONCURRENTLY: that waits for the transactions using it (a handler's, up to its timeout)
 * without making anyone wait, where dropping an attached partition would lock its parent and queue
 * every claim behind the longest handler. The detached events are looked at again under a lock
 * before the drop; one found unfinished (a replay between the two looks) attaches the period back.
 * A pass interrupted mid-way leaves detach-pending or detached tables, which the next one finishes.
 */
export async function dropPeriod(sql: postgres.Sql, suffix: string): Promise<PeriodDrop> {
  const events = `inbound_events_${suffix}`
  const held = await unfinishedIn(sql, events)
  if (held > 0) {
    // Attached, in case an earlier pass detached some of it before it found them.
    await sql`select hookledger_attach_ledger_period(${suffix})`
    return { suffix, unfinished: held, dropped: false }
  }
  for (const table of LEDGER_TABLES) await detachPartition(sql, table, `${table}_${suffix}`)
  const unfinished = await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${tx.unsafe(KEEPER_LOCK)})`
    const present = await tx<Array<{ name: string }>>`
      select t.name from unnest(${LEDGER_TABLES.map((table) => `${table}_${suffix}`)}::text[]) as t(name)
      where to_regclass(t.name) is not null`
    if (present.some((row) => row.name === events)) {
      await tx`lock table ${tx(events)} in access exclusive mode`
      const held = await unfinishedIn(tx, events)
      if (held > 0) {
        await tx`select hookledger_attach_ledger_period(${suffix})`
        return held
      }
    }
    // Children first: each has a foreign key on the events table.
    for (const row of [...present].reverse()) await tx`drop table ${tx(row.name)}`
    await tx`delete from ledger_periods where suffix = ${suffix}`
    return 0
  })
  return { suffix, unfinished: unfinished as number, dropped: unfinished === 0 }
}

/** Events of a period's table that are not DONE, read through its status index (0: no such table). */
async function unfinishedIn(client: postgres.Sql | postgres.TransactionSql, table: string): Promise<number> {
  if (!(await exists(client, table))) return 0
  const [row] = await client<Array<{ n: number }>>`
    select count(*)::int as n from ${client(table)} where status = any(${[...UNFINISHED]}::event_status[])`
  return row?.n ?? 0
}

/**
 * Drops every key generation whose keys are all older than the dedup window: the last key went in
 * KEY_GENERATION_OVERLAP after the generation ended. Detached CONCURRENTLY first, as periods are
 * (dropPeriod). Returns the suffixes dropped.
 */
export async function dropExpiredKeyGenerations(
  sql: postgres.Sql,
  options: { dedupWindowDays: number },
): Promise<string[]> {
  const expired = await sql<Array<{ suffix: string }>>`
    select suffix from inbound_key_generations
    where ends + ${KEY_GENERATION_OVERLAP}::interval < now() - ${options.dedupWindowDays} * interval '1 day'
    order by starts`
  for (const { suffix } of expired) {
    const partition = `inbound_event_keys_${suffix}`
    await detachPartition(sql, 'inbound_event_keys', partition)
    await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${tx.unsafe(KEEPER_LOCK)})`
      if (await exists(tx, partition)) await tx`drop table ${tx(partition)}`
      await tx`delete from inbound_key_generations where suffix = ${suffix}`
    })
  }
  return expired.map((row) => row.suffix)
}

/**
 * Detaches `partition` from `parent` CONCURRENTLY, or finishes a detach an interrupted pass left
 * pending; a table already detached is left as it is. Not in a transaction: DETACH … CONCURRENTLY
 * commits twice on its own. Names come from the fixed table list and the registry's digits.
 */
async function detachPartition(sql: postgres.Sql, parent: string, partition: string): Promise<void> {
  const [state] = await sql<Array<{ pending: boolean }>>`
    select inhdetachpending as pending from pg_inherits where inhrelid = to_regclass(${partition})`
  if (state === undefined) return
  await sql.unsafe(
    `alter table "${parent}" detach partition "${partition}" ${state.pending ? 'finalize' : 'concurrently'}`,
  )
}

async function exists(client: postgres.TransactionSql | postgres.Sql, table: string): Promise<boolean> {
  const [row] = await client<Array<{ yes: boolean }>>`select to_regclass(${table}) is not null as yes`
  return row?.yes === true
}

/** How many periods the ledger holds now: retention's count and those kept past it for their unfinished events. */
export async function ledgerPeriodsHeld(client: postgres.Sql): Promise<number> {
  const [row] = await client<Array<{ periods: number }>>`select count(*)::int as periods from ledger_periods`
  return row?.periods ?? 0
}

/** ledgerPeriodsHeld on a connection of its own, for a process choosing how to open its pools. */
export async function readLedgerPeriodsHeld(url: string): Promise<number> {
  const connection = openSingleConnection(url)
  try {
    return await ledgerPeriodsHeld(connection)
  } finally {
    await connection.end({ timeout: 5 })
  }
}

/** The periods and key generations there are, oldest first (doctor, tests). */
export async function ledgerPartitions(client: postgres.ISql): Promise<{
  periods: PartitionRange[]
  generations: PartitionRange[]
}> {
  const periods = await client<Array<{ suffix: string; starts: string; ends: string }>>`
    select suffix, starts::text, ends::text from ledger_periods order by starts`
  const generations = await client<Array<{ suffix: string; starts: string; ends: string }>>`
    select suffix, starts::text, ends::text from inbound_key_generations order by starts`
  const range = (row: { suffix: string; starts: string; ends: string }) => ({
    suffix: row.suffix,
    starts: new Date(row.starts),
    ends: new Date(row.ends),
  })
  return { periods: periods.map(range), generations: generations.map(range) }
}

export interface PartitionRange {
  suffix: string
  starts: Date
  ends: Date
}
