import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { retentionWarnings, startRetention } from '../../src/db/retention.js'
import { createLogger } from '../../src/logger.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testConfig } from '../support/stack.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

async function seed(eventId: string, status: string, ageDays: number, source = 'acme') {
  const [claim] = await claimEvents(database.sql, [
    { source, eventId, eventType: null, payloadHash: 'f'.repeat(64), body: Buffer.from('{}'), headers: {} },
  ])
  await database.sql`
    update inbound_events
    set status = ${status}::event_status, received_at = now() - ${ageDays} * interval '1 day'
    where id = ${claim?.id ?? ''}`
  if (status === 'done') {
    await database.sql`
      insert into event_attempts (event_row_id, attempt, outcome, started_at)
      values (${claim?.id ?? ''}, 1, 'done', now())`
  }
}

describe('retention', () => {
  it('deletes DONE events past their source retention in batches, and never unfinished ones', async () => {
    for (let i = 0; i < 25; i++) await seed(`old_done_${i}`, 'done', 31)
    await seed('young_done', 'done', 29)
    await seed('old_pending', 'pending', 90)
    await seed('old_processing', 'processing', 90)
    await seed('old_failed', 'failed', 90)
    await seed('other_source_done', 'done', 90, 'retired')
    const config = testConfig({ retention: { batchSize: 10 } }, { retentionDays: 30 })
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      expect(await retention.sweep()).toBe(25)
      const left = await database.sql`select event_id from inbound_events order by event_id`
      expect(left.map((row) => row.event_id)).toEqual([
        'old_failed',
        'old_pending',
        'old_processing',
        'other_source_done',
        'young_done',
      ])
      const attempts = await database.sql`select count(*)::int as n from event_attempts`
      expect(attempts[0]?.n).toBe(2) // young_done's and other_source_done's: the rest went with their rows
      expect(await retention.sweep()).toBe(0)
    } finally {
      await retention.stop()
    }
  })
})

describe('retention warnings', () => {
  it("warns when a source's retention ends before its provider stops retrying", () => {
    // Standard Webhooks senders retry for about 75 h: 2 days is too short, 4 days is enough.
    expect(retentionWarnings(testConfig({}, { retentionDays: 2 }))).toEqual([
      expect.stringContaining(
        "source 'acme': retentionDays 2 is shorter than the standard-webhooks retry horizon",
      ),
    ])
    expect(retentionWarnings(testConfig({}, { retentionDays: 4 }))).toEqual([])
  })
})
