import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents, createClaimBatcher, type NewEvent } from '../../src/db/claims.js'
import { openLedger } from '../../src/db/client.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

const event = (eventId: string, payloadHash: string, eventType: string | null = null): NewEvent => ({
  source: 'acme',
  eventId,
  eventType,
  payloadHash,
  body: Buffer.from([0, 255, 10, 13, 92, 34]),
  headers: { 'webhook-id': eventId },
})

describe('claims in one statement', () => {
  it('accepts the first delivery of a key in a batch; later ones are duplicates or conflicts', async () => {
    const results = await claimEvents(database.sql, [
      event('batch_a', 'h1', 'type.a'),
      event('batch_a', 'h1'),
      event('batch_b', 'h2'),
      event('batch_a', 'h9'),
    ])
    expect(results.map((r) => r.kind)).toEqual(['accepted', 'duplicate', 'accepted', 'conflict'])
    expect(results[1]?.id).toBe(results[0]?.id)
    expect(results[3]?.id).toBe(results[0]?.id)
    const [row] =
      await database.sql`select e.event_type, p.body, e.headers, e.payload_hash from inbound_events e
        join inbound_event_payloads p on p.event_row_id = e.id where e.event_id = 'batch_a'`
    expect(row).toMatchObject({
      event_type: 'type.a',
      payload_hash: 'h1',
      headers: { 'webhook-id': 'batch_a' },
    })
    expect(Buffer.compare(row?.body, Buffer.from([0, 255, 10, 13, 92, 34]))).toBe(0)
    const conflicts = await database.sql`select * from inbound_conflicts where event_id = 'batch_a'`
    expect(conflicts).toHaveLength(1)
  })

  it('gathers concurrent claims into batches and answers each with its own result', async () => {
    const batcher = createClaimBatcher(database.sql)
    const results = await Promise.all(
      Array.from({ length: 250 }, (_, i) => batcher.claim(event(`concurrent_${i % 100}`, `h${i % 100}`))),
    )
    expect(results.filter((r) => r.kind === 'accepted')).toHaveLength(100)
    expect(results.filter((r) => r.kind === 'duplicate')).toHaveLength(150)
    const [count] =
      await database.sql`select count(*)::int as n from inbound_events where event_id like 'concurrent_%'`
    expect(count?.n).toBe(100)
  })

  it('never commits a claim its caller gave up on, behind PgBouncer as on a direct connection', async () => {
    // A claim waits on another transaction's uncommitted key for the same event, past its deadline.
    // The server must cancel it: a claim that went on would insert and commit the event once the
    // other transaction rolled back, answered 503 all the same, and (behind PgBouncer, where only a
    // transaction carries the server's statement_timeout) with no bound on how long after, which
    // the key generations' overlap counts on.
    for (const [mode, query] of [
      ['direct', ''],
      ['PgBouncer', '?pgbouncer=true'],
    ] as const) {
      const eventId = `given_up_${mode}`
      let release = () => {}
      const released = new Promise<void>((resolve) => {
        release = resolve
      })
      let held = () => {}
      const holding = new Promise<void>((resolve) => {
        held = resolve
      })
      const holder = database.sql
        .begin(async (tx) => {
          await tx`
            insert into inbound_event_keys (generation, source, event_id, event_row_id, payload_hash, origin)
            select starts, 'acme', ${eventId}, gen_random_uuid(), 'h', 'webhook' from inbound_key_generations
            where starts <= now() and ends > now()`
          held()
          await released
          throw new Error('rolled back')
        })
        .catch(() => {})
      await holding
      const ledger = openLedger(`${database.url}${query}`, { max: 2, statementTimeoutMs: 500 })
      try {
        await expect(claimEvents(ledger.sql, [event(eventId, 'h')]), mode).rejects.toThrow()
      } finally {
        release()
        await holder
        await ledger.close()
      }
      // Time for a claim left running on the server to take the key and commit.
      await new Promise((resolve) => setTimeout(resolve, 500))
      const rows = await database.sql`select id from inbound_events where event_id = ${eventId}`
      expect(rows, mode).toHaveLength(0)
    }
  })
})
