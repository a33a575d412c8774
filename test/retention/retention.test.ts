import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { createLogger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { addOutboundGauges } from '../../src/outbound/gauges.js'
import { createOutboundLedger } from '../../src/outbound/ledger.js'
import { defineTool } from '../../src/outbound/tools.js'
import { startRetention } from '../../src/retention/loop.js'
import { retentionWarnings } from '../../src/retention/provider-horizon.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { captureLogs } from '../support/log-capture.js'
import { TEST_SECRET } from '../support/signing.js'
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

describe('retention of the outbound ledger', () => {
  const sent = defineTool<{ n: number }, { ok: true }>({
    name: 'sent',
    effect: 'idempotent',
    execute: async () => ({ kind: 'success', result: { ok: true } }),
  })
  const lost = defineTool<{ n: number }, never>({
    name: 'lost',
    effect: 'irreversible',
    execute: async () => {
      throw new Error('socket hang up')
    },
  })

  async function age(key: string, days: number) {
    await database.sql`update operations set updated_at = now() - ${days} * interval '1 day' where operation_key = ${key}`
  }
  async function evidence(eventId: string, key: string, status: string, ageDays: number) {
    await database.sql`
      insert into operation_evidence
        (source, event_id, event_type, event_row_id, operation_key, outcome, status, received_at)
      values ('stripe', ${eventId}, 'charge.succeeded', gen_random_uuid(), ${key}, 'succeeded',
        ${status}::evidence_status, now() - ${ageDays} * interval '1 day')`
  }
  const count = async (table: string, key: string) => {
    const [row] = await database.sql.unsafe<Array<{ n: number }>>(
      `select count(*)::int as n from ${table} where operation_key = $1`,
      [key],
    )
    return row?.n
  }

  it('deletes settled operations past operationDays with their attempts and audit, never open ones', async () => {
    const ledger = createOutboundLedger({ db: database.db, logger: createLogger('silent') })
    for (let i = 0; i < 12; i++) {
      expect((await ledger.invoke(sent, { key: `old:${i}`, args: { n: i } })).kind).toBe('completed')
      await age(`old:${i}`, 91)
    }
    expect((await ledger.invoke(sent, { key: 'young', args: { n: 0 } })).kind).toBe('completed')
    await age('young', 89)
    // Unknown outcome: open (needs_reconciliation) however old; an operator still owes it a decision.
    expect((await ledger.invoke(lost, { key: 'unknown', args: { n: 0 } })).kind).toBe('needs_reconciliation')
    await age('unknown', 400)
    await evidence('evt_settled', 'old:0', 'applied', 91)
    await evidence('evt_never_seen', 'nobody:1', 'pending', 91)
    await evidence('evt_for_open', 'unknown', 'pending', 91)
    await evidence('evt_recent', 'nobody:2', 'pending', 2)

    const config = testConfig({ retention: { batchSize: 5, operationDays: 90 } })
    const logs = captureLogs('info')
    const retention = startRetention({ sql: database.sql, config, logger: logs.logger })
    try {
      expect(await retention.sweep()).toBe(12 + 2) // 12 operations, 2 pieces of evidence
      // The open one is kept, and said so: in the pass's log and on /metrics.
      expect(logs.entries().filter((entry) => entry.level === 40)).toEqual([
        expect.objectContaining({
          operations: 1,
          byStatus: { needs_reconciliation: 1 },
          olderThanDays: 90,
          msg: expect.stringContaining('unsettled for longer than retention.operationDays'),
        }),
      ])
      const metrics = createMetrics()
      addOutboundGauges(metrics, database.sql, { tools: [], operationDays: 90 })
      expect(await metrics.registry.metrics()).toContain(
        'hookledger_operations_unsettled_past_retention{status="needs_reconciliation"} 1',
      )
      const left = await database.sql`select operation_key, status from operations order by operation_key`
      expect(left.map((row) => [row.operation_key, row.status])).toEqual([
        ['unknown', 'needs_reconciliation'],
        ['young', 'completed'],
      ])
      expect(await count('operation_audit', 'old:3')).toBe(0)
      expect(await count('operation_audit', 'young')).toBe(2) // claimed (attempt 1 started with it), succeeded
      const [attempts] = await database.sql`
        select count(*)::int as n from operation_attempts a
        where not exists (select 1 from operations o where o.id = a.operation_id)`
      expect(attempts?.n).toBe(0)
      const evidenceLeft = await database.sql`select event_id from operation_evidence order by event_id`
      expect(evidenceLeft.map((row) => row.event_id)).toEqual(['evt_for_open', 'evt_recent'])
      expect(await retention.sweep()).toBe(0)
    } finally {
      await retention.stop()
    }
  })

  it('the audit stays append-only outside the sweep: no entry is rewritten or deleted', async () => {
    const ledger = createOutboundLedger({ db: database.db, logger: createLogger('silent') })
    expect((await ledger.invoke(sent, { key: 'audited', args: { n: 1 } })).kind).toBe('completed')
    await expect(
      database.sql`update operation_audit set actor = 'someone' where operation_key = 'audited'`,
    ).rejects.toThrow('operation_audit is append-only')
    await expect(database.sql`delete from operation_audit where operation_key = 'audited'`).rejects.toThrow(
      'operation_audit is append-only',
    )
    // The sweep's own setting lets it delete, but never rewrite.
    await expect(
      database.sql.begin(async (tx) => {
        await tx`select set_config('hookledger.retention_sweep', 'on', true)`
        await tx`update operation_audit set actor = 'someone' where operation_key = 'audited'`
      }),
    ).rejects.toThrow('operation_audit is append-only')
    expect(await count('operation_audit', 'audited')).toBe(2) // claimed (attempt 1 started with it), succeeded
  })
})

describe('retention of backfill redelivery requests', () => {
  async function requested(source: string, guid: string, ageHours: number) {
    await database.sql`
      insert into backfill_redeliveries (source, guid, delivery_id, event, requested_at)
      values (${source}, ${guid}, '1', 'push', now() - ${ageHours} * interval '1 hour')`
  }

  it("keeps them as long as the source's DONE events, never less than its lookback, and the default for a removed source", async () => {
    // acme keeps its events 30 days; hub 1 day, but its backfill looks back 72 hours.
    await requested('acme', 'acme-31d', 31 * 24)
    await requested('acme', 'acme-29d', 29 * 24)
    await requested('hub', 'hub-73h', 73)
    await requested('hub', 'hub-71h', 71)
    await requested('retired', 'retired-31d', 31 * 24)
    await requested('retired', 'retired-29d', 29 * 24)
    const config = buildConfig(
      {
        sources: [
          {
            id: 'acme',
            verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
            handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
            retentionDays: 30,
          },
          {
            id: 'hub',
            verify: { scheme: 'github', secrets: ['s3cret'] },
            handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
            retentionDays: 1,
            backfill: { enabled: false, credential: 'env:GITHUB_TOKEN', repository: 'acme/shop', hookId: 7 },
          },
        ],
        retention: { batchSize: 2 },
      },
      () => 'token',
    )
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      expect(await retention.sweep()).toBe(3)
      const left = await database.sql`select guid from backfill_redeliveries order by guid`
      expect(left.map((row) => row.guid)).toEqual(['acme-29d', 'hub-71h', 'retired-29d'])
      expect(await retention.sweep()).toBe(0)
    } finally {
      await retention.stop()
    }
  })
})

describe('retention of conflict records', () => {
  async function conflict(source: string, eventId: string, ageHours: number) {
    await database.sql`
      insert into inbound_conflicts (source, event_id, payload_hash, original_payload_hash, received_at)
      values (${source}, ${eventId}, ${'a'.repeat(64)}, ${'b'.repeat(64)}, now() - ${ageHours} * interval '1 hour')`
  }

  it("keeps them as long as the source's events, and the default retention for a removed source", async () => {
    // acme keeps its events 30 days, brief 1 day; retired is no longer configured (default 30 days).
    for (let i = 0; i < 3; i++) await conflict('acme', `acme-31d-${i}`, 31 * 24)
    await conflict('acme', 'acme-29d', 29 * 24)
    await conflict('brief', 'brief-25h', 25)
    await conflict('brief', 'brief-23h', 23)
    await conflict('retired', 'retired-31d', 31 * 24)
    await conflict('retired', 'retired-29d', 29 * 24)
    const source = (id: string, retentionDays: number) => ({
      id,
      verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
      handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
      retentionDays,
    })
    const config = buildConfig(
      { sources: [source('acme', 30), source('brief', 1)], retention: { batchSize: 2 } },
      () => undefined,
    )
    const retention = startRetention({ sql: database.sql, config, logger: createLogger('silent') })
    try {
      expect(await retention.sweep()).toBe(5)
      const left = await database.sql`select event_id from inbound_conflicts order by event_id`
      expect(left.map((row) => row.event_id)).toEqual(['acme-29d', 'brief-23h', 'retired-29d'])
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
