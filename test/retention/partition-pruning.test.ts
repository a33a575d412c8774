import { randomUUID } from 'node:crypto'
import type postgres from 'postgres'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { leaseEvents, markEnqueued, markRequeued } from '../../src/db/events.js'
import { dropPeriod, ledgerPeriodsHeld } from '../../src/db/ledger-periods.js'
import { operationBatches } from '../../src/db/operation-batches.js'
import { rowIdRange } from '../../src/db/row-id-range.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { addPastDays, addPastPeriods } from '../support/periods.js'
import { claimedEventIds } from '../support/stored-events.js'

// The worker's batched statements join the ledger to arrays of row ids. Bounded by the lowest and
// highest of those ids (src/db/row-id-range.ts), they plan, open and lock the partitions of the
// periods the ids fall in only; unbounded, every period's partition of a 30-day ledger, each time.
// What a statement locked stays locked until its transaction ends, so each runs in one here and the
// test reads the partitions it holds from pg_locks. Each runs once: a custom plan, pruned when it is
// made. From a prepared statement's sixth run on a connection PostgreSQL may settle on a generic
// plan, which prunes the same partitions when the statement starts, but PostgreSQL 15 locks every
// partition of a generic plan first (locks only: the pruned ones are neither opened nor read).

const PAST_DAYS = 31

let database: TestDatabase

beforeEach(async () => {
  database = await createTestDatabase()
  await addPastDays(database.sql, PAST_DAYS)
})
afterEach(async () => {
  await database.drop()
})

/** Carries a test transaction's answer out of sql.begin, which rolls back on a throw. */
class RolledBack extends Error {
  constructor(readonly periods: string[]) {
    super('rolled back')
  }
}

/**
 * The periods (partition suffixes) of inbound_events whose partitions `work` locked, in a
 * transaction rolled back after: the ledger is left as it was.
 */
async function periodsLockedBy(work: (tx: postgres.Sql) => Promise<unknown>): Promise<string[]> {
  try {
    await database.sql.begin(async (tx) => {
      await work(tx as unknown as postgres.Sql)
      const rows = await tx<Array<{ suffix: string }>>`
        select distinct substring(c.relname from '^inbound_events_([0-9]+)$') as suffix
        from pg_locks l join pg_class c on c.oid = l.relation
        where l.pid = pg_backend_pid() and c.relname ~ '^inbound_events_[0-9]+$'
        order by 1`
      throw new RolledBack(rows.map((row) => row.suffix))
    })
  } catch (error) {
    if (error instanceof RolledBack) return error.periods
    throw error
  }
  throw new Error('the test transaction committed')
}

const today = async () => {
  const [row] = await database.sql<Array<{ suffix: string }>>`
    select suffix from ledger_periods where starts <= now() and ends > now()`
  return [String(row?.suffix)]
}

describe('the worker statements on a ledger of many periods', () => {
  it('touch only the period of the ids they are given', async () => {
    const ids = await claimedEventIds(database.sql, 20)
    const current = await today()
    expect(await ledgerPeriodsHeld(database.sql)).toBeGreaterThan(PAST_DAYS)

    const jobs = ids.map((id) => ({ id, jobId: `evt-${id}` }))
    expect(await periodsLockedBy((tx) => markEnqueued(tx, jobs))).toEqual(current)
    expect(await periodsLockedBy((tx) => markRequeued(tx, jobs))).toEqual(current)

    const requests = ids.map((id) => ({ id, token: randomUUID(), jobId: `evt-${id}` }))
    expect(await periodsLockedBy((tx) => leaseEvents(tx, requests, 60_000))).toEqual(current)
    // The lease above rolled back with its test transaction: lease for real, then settle.
    const leased = await leaseEvents(database.sql, requests, 60_000)
    const first = leased[0]
    if (first?.kind !== 'leased') throw new Error(`expected a lease, got ${first?.kind}`)
    const token = requests[0]?.token as string
    expect(
      await periodsLockedBy(async (tx) => {
        const settled = await operationBatches(tx).settle.run({
          done: { id: first.row.id, token, attempt: 1, startedAt: new Date(), finishedAt: new Date() },
        })
        expect(settled).toEqual({ completed: false, done: true })
      }),
    ).toEqual(current)
  })
})

describe('the worker statements on their generic plans', () => {
  it('read only the period of the ids they are given, pruning as each starts', async () => {
    const ids = await claimedEventIds(database.sql, 20)
    const [current] = await today()
    // A connection of the worker's own kind: every statement on its generic plan (openLedger).
    const connection = await database.genericPlans.reserve()
    try {
      // The scans are read from this backend's own counts, which pg_stat_xact_user_tables shows until
      // they are reported. Other backends' reports land whenever those go idle (setting up the periods
      // scans every one of them), so a before/after of pg_stat_user_tables would count their scans too.
      // Reported now, this backend's counts are empty; inside one transaction they stay unreported.
      await connection`select pg_stat_force_next_flush()`
      await connection`begin`
      const requests = ids.map((id) => ({ id, token: randomUUID(), jobId: `evt-${id}` }))
      await markEnqueued(connection, requests)
      const leased = await leaseEvents(connection, requests, 60_000)
      const first = leased[0]
      if (first?.kind !== 'leased') throw new Error(`expected a lease, got ${first?.kind}`)
      const settled = await operationBatches(connection).settle.run({
        done: {
          id: first.row.id,
          token: requests[0]?.token as string,
          attempt: 1,
          startedAt: new Date(),
          finishedAt: new Date(),
        },
      })
      expect(settled).toEqual({ completed: false, done: true })
      const [plans] = await connection<Array<{ custom: number }>>`
        select coalesce(sum(custom_plans), 0)::int as custom from pg_prepared_statements`
      expect(plans?.custom).toBe(0)
      const scanned = await connection<Array<{ suffix: string }>>`
        select distinct substring(relname from '_([0-9]+)$') as suffix
        from pg_stat_xact_user_tables
        where relname ~ '^(inbound_events|inbound_event_payloads)_[0-9]+$' and seq_scan + idx_scan > 0
        order by 1`
      expect(scanned.map((row) => row.suffix)).toEqual([current])
    } finally {
      await connection`rollback`
      connection.release()
    }
  })
})

describe('the lease names the partitions of its batch’s period (period-tables.ts)', () => {
  /** The periods of inbound_events whose partitions `work` locked on a connection of generic plans. */
  async function lockedOnGenericPlans(
    work: (connection: postgres.Sql) => Promise<unknown>,
  ): Promise<string[]> {
    const connection = await database.genericPlans.reserve()
    try {
      await connection`begin`
      await work(connection)
      const rows = await connection<Array<{ suffix: string }>>`
        select distinct substring(c.relname from '^inbound_events_([0-9]+)$') as suffix
        from pg_locks l join pg_class c on c.oid = l.relation
        where l.pid = pg_backend_pid() and c.relname ~ '^inbound_events_[0-9]+$'
        order by 1`
      return rows.map((row) => row.suffix)
    } finally {
      await connection`rollback`
      connection.release()
    }
  }

  it('on its generic plan it locks that period’s partitions only, where a statement on the parent locks every one', async () => {
    const ids = await claimedEventIds(database.sql, 20)
    const requests = ids.map((id) => ({ id, token: randomUUID(), jobId: `evt-${id}` }))
    expect(await lockedOnGenericPlans((connection) => leaseEvents(connection, requests, 60_000))).toEqual(
      await today(),
    )
    expect(await lockedOnGenericPlans((connection) => markEnqueued(connection, requests))).toEqual(
      await today(),
    )
    // markRequeued (the relay's, rare) still names the parent: on a generic plan that locks them all.
    expect(
      (await lockedOnGenericPlans((connection) => markRequeued(connection, requests))).length,
    ).toBeGreaterThan(PAST_DAYS)
    // And it leases as the statement on the parent did.
    const leased = await leaseEvents(database.sql, requests, 60_000)
    expect(leased.map((result) => result.kind)).toEqual(ids.map(() => 'leased'))
  })

  it('a period dropped since the periods were read: the lease runs again on the parents', async () => {
    const [dropped] = await addPastPeriods(database.sql, { daysAgo: [3] })
    const [row] = await database.sql<Array<{ id: string }>>`
      select hookledger_uuid_v7(now() - interval '3 days')::text as id`
    const lease = () =>
      leaseEvents(database.sql, [{ id: String(row?.id), token: randomUUID(), jobId: 'evt-gone' }], 60_000)
    // The pool reads the periods with that one still there: the lease of an id in it names its partitions.
    expect(await lease()).toEqual([{ kind: 'missing' }])
    expect(await dropPeriod(database.sql, dropped)).toMatchObject({ dropped: true })
    expect(await lease()).toEqual([{ kind: 'missing' }])
  })
})

describe('rowIdRange', () => {
  it('bounds ids as PostgreSQL orders uuids, whatever their case, skipping nulls', async () => {
    const ids = [
      '01937a00-0000-7000-8000-00000000000b',
      null,
      '01937A00-0000-7000-8000-00000000000A',
      'ffffffff-0000-7000-8000-000000000000',
      undefined,
    ]
    const range = rowIdRange(ids)
    const [sorted] = await database.sql<Array<{ lowest: string; highest: string }>>`
      select (array_agg(id::text order by id))[1] as lowest, (array_agg(id::text order by id desc))[1] as highest
      from unnest(${ids.flatMap((id) => id ?? [])}::uuid[]) as id`
    expect(range).toEqual(sorted)
    expect(rowIdRange([null])).toEqual({ lowest: null, highest: null })
  })
})
