import { randomUUID } from 'node:crypto'
import type postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { leaseEvents } from '../../src/db/events.js'
import { ledgerPeriodsHeld } from '../../src/db/ledger-periods.js'
import type { Logger } from '../../src/logger.js'
import { startRetention } from '../../src/retention/loop.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { deliverEvent, statusCounts } from '../support/delivery.js'
import { captureLogs } from '../support/log-capture.js'
import { addPastDays, addPastPeriods } from '../support/periods.js'
import { FAST_WORKER, startTestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'
import { claimedEventIds, insertAgedEvent } from '../support/stored-events.js'

// The worker's batched statements run on connections of their own that keep one generic plan per
// statement (src/db/client.ts, openLedger): on a ledger whose periods hold a history the planner
// would otherwise plan the lease, the settle and the enqueue mark again at every call. The rest of
// the pool keeps plans made for their values. A ledger of more than GENERIC_PLAN_MAX_PERIODS periods
// has no such connections: a generic plan locks every period.

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

/** Leases each row alone on one connection, then reads that connection's plans of the lease. */
async function leasePlansOn(pool: postgres.Sql, ids: readonly string[]) {
  const connection = await pool.reserve()
  try {
    for (const id of ids) {
      await leaseEvents(connection, [{ id, token: randomUUID(), jobId: `job-${id}` }], 30_000)
    }
    const [plans] = await connection<Array<{ generic: number; custom: number; mode: string }>>`
      select coalesce(sum(generic_plans), 0)::int as generic, coalesce(sum(custom_plans), 0)::int as custom,
             current_setting('plan_cache_mode') as mode
      from pg_prepared_statements
      where statement like '%distinct on (id) id, token, job_id%' and statement not like '%pg_prepared_statements%'`
    return plans
  } finally {
    connection.release()
  }
}

describe('the generic-plan connections', () => {
  it('plan the lease once, where the pool plans calls for their values', async () => {
    expect(await leasePlansOn(database.genericPlans, await claimedEventIds(database.sql, 8))).toEqual({
      generic: 8,
      custom: 0,
      mode: 'force_generic_plan',
    })
    // The same statement on the pool: PostgreSQL's default makes a custom plan for each of the first
    // five calls at least (here for all eight: a one-row batch's custom plan is priced below the
    // generic one).
    const pool = await leasePlansOn(database.sql, await claimedEventIds(database.sql, 8))
    expect(pool?.mode).toBe('auto')
    expect(pool?.custom).toBeGreaterThanOrEqual(5)
  })

  it("carry a running worker's leases, settles and enqueue marks, and the pool none of them", async () => {
    const backends = await backendsAfterForwarding({})
    const generic = backends.filter((backend) => backend.name === GENERIC)
    expect(generic.length).toBeGreaterThan(0)
    expect(generic.filter((backend) => !batched(backend.query))).toEqual([])
    expect(backends.filter((backend) => backend.name === POOL && batched(backend.query))).toEqual([])
  }, 40_000)

  it('are not opened for a ledger that keeps more than 40 periods: the pool carries those statements', async () => {
    // 60 days of daily periods: 63 periods, more than GENERIC_PLAN_MAX_PERIODS.
    const logs = captureLogs('info')
    const backends = await backendsAfterForwarding({ days: 60, logger: logs.logger })
    expect(backends.filter((backend) => backend.name === GENERIC)).toEqual([])
    // And the process says so at start, with the count.
    expect(logs.entries()).toContainEqual(
      expect.objectContaining({
        periodsKept: 63,
        most: 40,
        msg: expect.stringContaining('planned at each call'),
      }),
    )
    expect(
      backends.filter((backend) => backend.name === POOL && batched(backend.query)).length,
    ).toBeGreaterThan(0)
  }, 40_000)

  it('are not opened for a ledger that holds more than 40 periods, whatever its config keeps', async () => {
    // The default keeps 33; 42 past periods (kept past retention for their unfinished events, say) make 45.
    const logs = captureLogs('info')
    const backends = await backendsAfterForwarding({ pastPeriods: 42, logger: logs.logger })
    expect(backends.filter((backend) => backend.name === GENERIC)).toEqual([])
    expect(logs.entries()).toContainEqual(expect.objectContaining({ periodsKept: 33, periodsHeld: 45 }))
  }, 40_000)
})

describe('a process that keeps generic plans', () => {
  it('says at each retention pass once the periods its ledger holds pass 40', async () => {
    const ledger = await createTestDatabase()
    try {
      // 75 past days: the default keeps the 30 within retention, and drops the 45 before them but
      // for the 10 that each hold a PENDING event.
      await addPastDays(ledger.sql, 75)
      for (let daysAgo = 31; daysAgo <= 40; daysAgo++) await pendingEventOn(ledger.sql, daysAgo)
      const config = testConfig()
      const pass = async (genericPlans: boolean) => {
        const logs = captureLogs()
        const retention = startRetention({ sql: ledger.sql, config, logger: logs.logger, genericPlans })
        try {
          await retention.sweep()
        } finally {
          await retention.stop()
        }
        return logs.entries().filter((entry) => String(entry.msg).includes('generic plan'))
      }
      expect(await pass(true)).toEqual([
        expect.objectContaining({
          level: 40,
          periodsHeld: 43,
          most: 40,
          msg: expect.stringContaining('restart it'),
        }),
      ])
      expect(await ledgerPeriodsHeld(ledger.sql)).toBe(43)
      // Planned at each call already: nothing to say.
      expect(await pass(false)).toEqual([])
    } finally {
      await ledger.drop()
    }
  }, 40_000)

  it("a running service's retention pass says so, for the generic plans it opened at start", async () => {
    const ledger = await createTestDatabase()
    // Ten periods past retention, each kept for a PENDING event: 13 at start, generic plans kept.
    await addPastPeriods(ledger.sql, { daysAgo: Array.from({ length: 10 }, (_, i) => 31 + i) })
    for (let daysAgo = 31; daysAgo <= 40; daysAgo++) await pendingEventOn(ledger.sql, daysAgo)
    const logs = captureLogs()
    const service = await startTestService({
      database: ledger,
      logger: logs.logger,
      config: testConfig({ retention: { intervalMs: 1000 } }),
    })
    try {
      const warnings = () => logs.entries().filter((entry) => String(entry.msg).includes('restart it'))
      // The 30 days within retention make 43 periods held.
      await addPastDays(ledger.sql, 30)
      await expect
        .poll(warnings, { timeout: 15_000 })
        .toContainEqual(expect.objectContaining({ level: 40, periodsHeld: 43, most: 40 }))
    } finally {
      await service.close()
      await ledger.drop()
    }
  }, 40_000)
})

/** A PENDING event received `daysAgo` days ago, in that day's period: retention keeps the period for it. */
async function pendingEventOn(sql: postgres.Sql, daysAgo: number) {
  await insertAgedEvent(sql, { eventId: `evt_kept_${daysAgo}`, status: 'pending', daysAgo })
}

const GENERIC = 'hookledger generic plans'
const POOL = 'hookledger'

/** A leased, settled or enqueue-marked statement: the worker's batched statements. */
const batched = (query: string) =>
  /distinct on \(id\) id, token, job_id|Every array travels as text\[\]|update inbound_events e set enqueued_at/.test(
    query,
  )

/**
 * Each of a service's backends, by application name, with its last statement, once the service
 * forwarded 40 events; `days`: its source's retention and dedup window (the periods it keeps);
 * `pastPeriods`: periods added before today's before it starts.
 */
async function backendsAfterForwarding(options: { days?: number; pastPeriods?: number; logger?: Logger }) {
  // A database of its own: the only connections on it are the service's.
  const ledger = await createTestDatabase()
  await addPastDays(ledger.sql, options.pastPeriods ?? 0)
  const sink = await startSink(() => ({ status: 200 }))
  const days = options.days === undefined ? {} : { retentionDays: options.days }
  const service = await startTestService({
    database: ledger,
    ...(options.logger === undefined ? {} : { logger: options.logger }),
    config: buildConfig(
      {
        sources: [
          {
            id: 'plans',
            verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
            handler: { type: 'forward', url: sink.url },
            ...days,
          },
        ],
        worker: FAST_WORKER,
        ...(options.days === undefined ? {} : { retention: { dedupWindowDays: options.days } }),
      },
      () => undefined,
    ),
  })
  try {
    await Promise.all(
      Array.from({ length: 40 }, (_, i) => deliverEvent(service.url, 'plans', `evt_plans_${i}`)),
    )
    await expect
      .poll(() => statusCounts(ledger.sql, 'plans'), { timeout: 20_000, interval: 100 })
      .toEqual({ done: 40 })
    return await ledger.sql<Array<{ name: string; query: string }>>`
      select application_name as name, query from pg_stat_activity
      where datname = current_database() and application_name like 'hookledger%' and pid <> pg_backend_pid()`
  } finally {
    await service.close()
    await sink.close()
    await ledger.drop()
  }
}
