import type postgres from 'postgres'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { DEFAULT_RETENTION_DAYS } from '../../src/config/config.js'
import { claimEvents } from '../../src/db/claims.js'
import {
  dropPeriod,
  extendLedgerPartitions,
  LEDGER_TABLES,
  ledgerPartitions,
  ledgerPeriodsHeld,
} from '../../src/db/ledger-periods.js'
import { createLogger } from '../../src/logger.js'
import { startRetention } from '../../src/retention/loop.js'
import {
  keepPartitions,
  ledgerPeriodsKept,
  periodKeepDays,
  usesGenericPlans,
} from '../../src/retention/partitions.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { captureLogs } from '../support/log-capture.js'
import { addPastPeriods } from '../support/periods.js'
import { signedHeaders } from '../support/signing.js'
import { createApiStack, testConfig } from '../support/stack.js'
import { insertAgedEvent, newEvent } from '../support/stored-events.js'

// The partitioned ledger (migration 0018): retention drops whole periods, the dedup keys outlive
// them for the window, and two copies of one event meet on one key generation even when their
// claims fall on either side of a generation's end.

let database: TestDatabase

beforeEach(async () => {
  database = await createTestDatabase()
})
afterEach(async () => {
  await database.drop()
})

/**
 * An event claimed `daysAgo` days ago, as such a claim leaves it: its row (id of that time) with an
 * attempt, a payload and a route in that day's partitions, and its key in the current generation.
 */
async function seedAged(sql: postgres.Sql, eventId: string, status: string, daysAgo: number) {
  const id = await insertAgedEvent(sql, { eventId, status, daysAgo })
  await sql`insert into inbound_event_payloads (event_row_id, body) values (${id}, '\\x7b7d')`
  await sql`insert into event_attempts (event_row_id, attempt, outcome, started_at) values (${id}, 1, 'done', now())`
  await sql`insert into event_routes (event_row_id, route_id, status) values (${id}, 'r', 'done')`
  await sql`
    insert into inbound_event_keys (generation, source, event_id, event_row_id, payload_hash, origin)
    select starts, 'acme', ${eventId}, ${id}, ${'a'.repeat(64)}, 'webhook' from inbound_key_generations
    where starts <= now() and ends > now()`
  return id
}

/** Every key generation gone, as if no keeper had ever made one. */
async function dropAllKeyGenerations(sql: postgres.Sql) {
  const generations = await sql<Array<{ suffix: string }>>`select suffix from inbound_key_generations`
  for (const { suffix } of generations) await sql`drop table ${sql(`inbound_event_keys_${suffix}`)}`
  await sql`delete from inbound_key_generations`
}

const partitionExists = async (sql: postgres.Sql, name: string) => {
  const [row] = await sql<Array<{ present: boolean }>>`select to_regclass(${name}) is not null as present`
  return row?.present === true
}

describe('the partitioned ledger', () => {
  it('drops a period past every source retention whole, its five child partitions with it, deleting no row one by one', async () => {
    const [old] = await addPastPeriods(database.sql, { daysAgo: [40, 20] })
    for (let i = 0; i < 50; i++) await seedAged(database.sql, `old_${i}`, 'done', 40)
    for (let i = 0; i < 5; i++) await seedAged(database.sql, `young_${i}`, 'done', 20)
    const config = testConfig({}, { retentionDays: 30 })
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      // One period, and not one row: a row deleted by the row sweep would count 1 each.
      expect(await retention.sweep()).toBe(1)
    } finally {
      await retention.stop()
    }
    for (const table of LEDGER_TABLES) {
      expect(await partitionExists(database.sql, `${table}_${old}`), table).toBe(false)
    }
    const { periods } = await ledgerPartitions(database.sql)
    expect(periods.map((period) => period.suffix)).not.toContain(old)
    const [left] = await database.sql<Array<{ events: number; attempts: number }>>`
      select (select count(*)::int from inbound_events) as events, (select count(*)::int from event_attempts) as attempts`
    expect(left).toEqual({ events: 5, attempts: 5 })
  })

  it('keeps a period that holds an unfinished event, deletes its DONE rows one by one, and drops it once finished', async () => {
    const [period] = await addPastPeriods(database.sql, { daysAgo: [50] })
    for (let i = 0; i < 3; i++) await seedAged(database.sql, `done_${i}`, 'done', 50)
    const failed = await seedAged(database.sql, 'failed', 'failed', 50)
    const config = testConfig({}, { retentionDays: 30 })
    const logs = captureLogs()
    const retention = startRetention({ sql: database.sql, config, logger: logs.logger })
    try {
      expect(await retention.sweep()).toBe(3)
      expect(await partitionExists(database.sql, `inbound_events_${period}`)).toBe(true)
      expect(logs.text()).toMatch(/kept for their PENDING, PROCESSING or FAILED/)
      const rows = await database.sql`select event_id from inbound_events`
      expect(rows.map((row) => row.event_id)).toEqual(['failed'])
      await database.sql`update inbound_events set status = 'done' where id = ${failed}`
      expect(await retention.sweep()).toBe(1)
      expect(await partitionExists(database.sql, `inbound_events_${period}`)).toBe(false)
    } finally {
      await retention.stop()
    }
  })

  it('leaves the DONE rows of a period not yet past every retention to its drop, and row-deletes a shorter-lived source', async () => {
    // 30 days and one hour ago: past acme's 30 days, in a period that ends less than 30 days ago.
    const [row] = await database.sql<Array<{ hours: number }>>`
      select extract(epoch from now() - date_trunc('day', now(), 'UTC')) / 3600 as hours`
    const hoursIntoToday = Number(row?.hours)
    const [period] = await addPastPeriods(database.sql, { daysAgo: [30] })
    const ageDays = 30 + Math.min(1, hoursIntoToday / 2) / 24
    for (let i = 0; i < 4; i++) await seedAged(database.sql, `edge_${i}`, 'done', ageDays)
    const config = testConfig({}, { retentionDays: 30 })
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      expect(await retention.sweep()).toBe(0)
      expect(await partitionExists(database.sql, `inbound_events_${period}`)).toBe(true)
    } finally {
      await retention.stop()
    }
    const [left] = await database.sql<Array<{ n: number }>>`select count(*)::int as n from inbound_events`
    expect(left?.n).toBe(4)
  })

  it('drops a period without making a claim wait, while a handler holds its transaction open', async () => {
    const [old] = await addPastPeriods(database.sql, { daysAgo: [40] })
    await seedAged(database.sql, 'old', 'done', 40)
    const [current] = await claimEvents(database.sql, [newEvent('held_by_a_handler')])
    // A handler's transaction: it holds its event's row (and so a lock on inbound_events) for as long
    // as the handler runs.
    const handler = await database.sql.reserve()
    try {
      await handler`begin`
      await handler`select id from inbound_events where id = ${String(current?.id)} for update`
      let dropped = false
      const drop = dropPeriod(database.sql, old).then((outcome) => {
        dropped = true
        return outcome
      })
      await new Promise((resolve) => setTimeout(resolve, 500))
      const started = performance.now()
      const [claimed] = await claimEvents(database.sql, [newEvent('during_the_drop')])
      expect(claimed?.kind).toBe('accepted')
      expect(performance.now() - started).toBeLessThan(2000)
      expect(dropped).toBe(false) // the detach still waits for the handler, and nobody waits for it
      await handler`commit`
      expect(await drop).toEqual({ suffix: old, unfinished: 0, dropped: true })
    } finally {
      handler.release()
    }
  })

  it('finishes a drop an earlier pass left half-way, and attaches back a period found unfinished once detached', async () => {
    const [halfway] = await addPastPeriods(database.sql, { daysAgo: [45] })
    await seedAged(database.sql, 'halfway', 'done', 45)
    // A pass that stopped after detaching the events and the attempts.
    await database.sql`alter table inbound_events detach partition ${database.sql(`inbound_events_${halfway}`)}`
    await database.sql`alter table event_attempts detach partition ${database.sql(`event_attempts_${halfway}`)}`
    expect(await dropPeriod(database.sql, halfway)).toEqual({ suffix: halfway, unfinished: 0, dropped: true })
    for (const table of ['inbound_events', 'event_attempts', 'event_routes']) {
      expect(await partitionExists(database.sql, `${table}_${halfway}`), table).toBe(false)
    }
    // Detached with a FAILED event in it (replayed between the first look and the detach): back it goes.
    const [held] = await addPastPeriods(database.sql, { daysAgo: [46] })
    const failed = await seedAged(database.sql, 'replayed', 'failed', 46)
    await database.sql`alter table inbound_events detach partition ${database.sql(`inbound_events_${held}`)}`
    expect(await dropPeriod(database.sql, held)).toEqual({ suffix: held, unfinished: 1, dropped: false })
    const [row] = await database.sql<Array<{ status: string; partition: string }>>`
      select status::text, tableoid::regclass::text as partition from inbound_events where id = ${failed}`
    expect(row).toEqual({ status: 'failed', partition: `inbound_events_${held}` })
  })

  it('answers a delivery of an event whose period was dropped as a duplicate until its key generation expires', async () => {
    await addPastPeriods(database.sql, { daysAgo: [40] })
    const gone = await seedAged(database.sql, 'gone', 'done', 40)
    // Two generations before the current one: one whose keys are still inside a 30-day window, one
    // whose are not.
    await database.sql`
      select hookledger_add_key_generation(g.starts - interval '70 days', g.starts - interval '40 days'),
             hookledger_add_key_generation(g.starts - interval '40 days', g.starts)
      from (select min(starts) as starts from inbound_key_generations) g`
    await database.sql`
      insert into inbound_event_keys (generation, source, event_id, event_row_id, payload_hash, origin)
      select starts, 'acme', name, hookledger_uuid_v7(starts), ${'a'.repeat(64)}, 'webhook'
      from (select min(starts) as starts from inbound_key_generations) g,
           (values ('expired')) as names(name)`
    await database.sql`
      insert into inbound_event_keys (generation, source, event_id, event_row_id, payload_hash, origin)
      select max(starts), 'acme', 'kept', hookledger_uuid_v7(now()), ${'a'.repeat(64)}, 'webhook'
      from inbound_key_generations where ends <= now()`
    const config = testConfig({ retention: { dedupWindowDays: 30 } }, { retentionDays: 30 })
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      await retention.sweep()
    } finally {
      await retention.stop()
    }
    expect(await partitionExists(database.sql, 'inbound_events')).toBe(true)
    const results = await claimEvents(database.sql, [newEvent('gone'), newEvent('kept'), newEvent('expired')])
    expect(results.map((result) => result.kind)).toEqual(['duplicate', 'duplicate', 'accepted'])
    expect(results[0]?.id).toBe(gone)
    const { generations } = await ledgerPartitions(database.sql)
    expect(generations).toHaveLength(2) // the expired one went whole
    // Its id reused with another body is a conflict (409), recorded, even with its row gone.
    const [reused] = await claimEvents(database.sql, [{ ...newEvent('gone'), payloadHash: 'b'.repeat(64) }])
    expect(reused).toEqual({ kind: 'conflict', id: gone })
    const conflicts = await database.sql`select payload_hash from inbound_conflicts where event_id = 'gone'`
    expect(conflicts.map((row) => row.payload_hash)).toEqual(['b'.repeat(64)])
  })

  it('makes two copies claimed on either side of a generation end meet on one unique index', async () => {
    // The current generation ends two seconds from now; the next one starts there. A copy claimed
    // before the end holds its key (uncommitted) in the current generation only, as a slow claim
    // would; the copy claimed after the end must wait for it, not be accepted beside it.
    await dropAllKeyGenerations(database.sql)
    const [bounds] = await database.sql<Array<{ boundary: string }>>`
      select hookledger_add_key_generation(now() - interval '1 day', date_trunc('second', now()) + interval '2 seconds'),
             hookledger_add_key_generation(date_trunc('second', now()) + interval '2 seconds', now() + interval '30 days'),
             (date_trunc('second', now()) + interval '2 seconds')::text as boundary`
    const boundary = new Date(String(bounds?.boundary))
    const first = await database.sql.reserve()
    try {
      await first`begin`
      await first`
        insert into inbound_event_keys (generation, source, event_id, event_row_id, payload_hash, origin)
        select min(starts), 'acme', 'straddling', hookledger_uuid_v7(now()), ${'a'.repeat(64)}, 'webhook'
        from inbound_key_generations`
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, boundary.getTime() - Date.now()) + 300))
      let settled = false
      const second = claimEvents(database.sql, [newEvent('straddling')]).then((results) => {
        settled = true
        return results
      })
      await new Promise((resolve) => setTimeout(resolve, 500))
      expect(settled).toBe(false) // waiting on the first copy's key in the generation that ended
      await first`commit`
      const [result] = await second
      expect(result?.kind).toBe('duplicate')
    } finally {
      first.release()
    }
    const keys = await database.sql`select generation from inbound_event_keys where event_id = 'straddling'`
    expect(keys).toHaveLength(1) // the second copy's key in the next generation went with its loss
  })

  it('claims concurrent copies of one event inside a generation overlap exactly once, writing the key to both generations', async () => {
    await dropAllKeyGenerations(database.sql)
    await database.sql`
      select hookledger_add_key_generation(now() - interval '1 day', now() + interval '10 minutes'),
             hookledger_add_key_generation(now() + interval '10 minutes', now() + interval '30 days')`
    const results = await Promise.all(
      Array.from({ length: 20 }, () => claimEvents(database.sql, [newEvent('storm')])),
    )
    const kinds = results.flat().map((result) => result.kind)
    expect(kinds.filter((kind) => kind === 'accepted')).toHaveLength(1)
    expect(kinds.filter((kind) => kind === 'duplicate')).toHaveLength(19)
    const [counts] = await database.sql<Array<{ keys: number; events: number }>>`
      select (select count(*)::int from inbound_event_keys where event_id = 'storm') as keys,
             (select count(*)::int from inbound_events where event_id = 'storm') as events`
    expect(counts).toEqual({ keys: 2, events: 1 })
  })

  it('refuses to claim, writing nothing, when no key generation covers now', async () => {
    await dropAllKeyGenerations(database.sql)
    await expect(claimEvents(database.sql, [newEvent('nowhere')])).rejects.toThrow(
      /the ledger has no dedup key generation \(inbound_key_generations\) for now/,
    )
    const [row] = await database.sql<Array<{ n: number }>>`select count(*)::int as n from inbound_events`
    expect(row?.n).toBe(0)
  })

  it('answers 503 ledger_partition_missing, writing nothing, to a delivery no partition can take', async () => {
    const stack = await createApiStack()
    try {
      const post = (id: string) => {
        const body = `{"type":"invoice.paid","id":"${id}"}`
        return stack.app.request('/webhooks/acme', {
          method: 'POST',
          body,
          headers: signedHeaders(body, { id }),
        })
      }
      const { sql } = stack.database
      const [today] = await sql<Array<{ suffix: string }>>`
        select suffix from ledger_periods where starts <= now() and ends > now()`
      await sql`update inbound_events set status = 'done'`
      await dropPeriod(sql, String(today?.suffix))
      const noPeriod = await post('evt_no_period')
      expect(noPeriod.status).toBe(503)
      expect(noPeriod.headers.get('retry-after')).toBe('60')
      expect(await noPeriod.json()).toMatchObject({ error: { code: 'ledger_partition_missing' } })
      await dropAllKeyGenerations(sql)
      const noGeneration = await post('evt_no_generation')
      expect(noGeneration.status).toBe(503)
      expect(await noGeneration.json()).toMatchObject({ error: { code: 'ledger_partition_missing' } })
      const [written] = await sql<
        Array<{ keys: number }>
      >`select count(*)::int as keys from inbound_event_keys`
      expect(written?.keys).toBe(0)
    } finally {
      await stack.close()
    }
  })

  it('keeps periods for the longest retentionDays, and for the default when no source is configured', () => {
    expect(periodKeepDays(testConfig({}, { retentionDays: 12 }))).toBe(12)
    expect(periodKeepDays(buildConfig({ sources: [] }, () => undefined))).toBe(DEFAULT_RETENTION_DAYS)
  })

  it('counts the periods a ledger holds once retention ran, and keeps generic plans for 40 of them at most, held or kept', async () => {
    const config = testConfig({}, { retentionDays: 12 })
    await addPastPeriods(database.sql, { daysAgo: Array.from({ length: 20 }, (_, i) => i + 1) })
    await keepPartitions(database.sql, config, createLogger('silent'))
    // Twelve days back, today, two ahead.
    expect(ledgerPeriodsKept(config)).toBe(15)
    expect(await ledgerPeriodsHeld(database.sql)).toBe(15)

    const keeping = (days: number, partitionPeriod: 'day' | 'week') =>
      testConfig({ retention: { partitionPeriod, dedupWindowDays: days } }, { retentionDays: days })
    expect(ledgerPeriodsKept(keeping(30, 'week'))).toBe(7)
    // The default (30 days of daily periods) keeps them; 60 days of days does not, of weeks does.
    expect(ledgerPeriodsKept(keeping(30, 'day'))).toBe(33)
    expect(usesGenericPlans(keeping(30, 'day'), 0)).toBe(true)
    expect(usesGenericPlans(keeping(60, 'day'), 0)).toBe(false)
    expect(usesGenericPlans(keeping(60, 'week'), 0)).toBe(true)
    // Periods held past retention (for unfinished events) count as well.
    expect(usesGenericPlans(keeping(30, 'day'), 41)).toBe(false)
  })

  it('makes weekly periods from Monday up to two days ahead, and nothing more when run again', async () => {
    const first = await extendLedgerPartitions(database.sql, {
      period: 'week',
      dedupWindowDays: 30,
      aheadDays: 9,
    })
    expect(first.periods.length).toBeGreaterThan(0)
    const { periods } = await ledgerPartitions(database.sql)
    const last = periods.at(-1)
    expect(last?.ends.getUTCDay()).toBe(1) // a Monday
    expect(last?.ends.getTime()).toBeGreaterThanOrEqual(Date.now() + 9 * 86_400_000)
    const again = await extendLedgerPartitions(database.sql, {
      period: 'week',
      dedupWindowDays: 30,
      aheadDays: 9,
    })
    expect(again).toEqual({ periods: [], generations: [] })
    // Every id a claim makes now has a partition.
    const [accepted] = await claimEvents(database.sql, [newEvent('weekly')])
    expect(accepted?.kind).toBe('accepted')
  })
})
