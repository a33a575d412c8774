import { eq, inArray } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { replayFailedByFilter } from '../../src/db/bulk-replay.js'
import { replayEvent } from '../../src/db/replay.js'
import { eventReplays, inboundEvents } from '../../src/db/schema.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { seedEvent } from './seed.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

describe('replaying FAILED events in the ledger', () => {
  it('two bulk replays at once flip each row once, and the bound holds', async () => {
    const ids: string[] = []
    for (let i = 0; i < 30; i += 1) {
      ids.push(
        await seedEvent(database.db, { source: 'race', eventId: `race-${i}`, status: 'failed', attempts: 3 }),
      )
    }
    const flip = async (by: string) => {
      const ids: string[] = []
      await replayFailedByFilter(database.db, {
        filter: { source: 'race' },
        by,
        limit: 20,
        requeue: async (chunk) => {
          ids.push(...chunk)
        },
      })
      return ids
    }
    const [a, b] = await Promise.all([flip('ana'), flip('bo')])
    expect(new Set([...(a ?? []), ...(b ?? [])]).size).toBe((a?.length ?? 0) + (b?.length ?? 0))
    expect(a?.length).toBeLessThanOrEqual(20)
    expect(b?.length).toBeLessThanOrEqual(20)
    const rows = await database.db.select().from(inboundEvents).where(inArray(inboundEvents.id, ids))
    const replayed = rows.filter((row) => row.status === 'pending')
    expect(replayed.length).toBe((a?.length ?? 0) + (b?.length ?? 0))
    expect(replayed.length).toBeGreaterThanOrEqual(20)
    for (const row of replayed) expect(row).toMatchObject({ attempts: 0, replays: 1 })
    const audits = await database.db.select().from(eventReplays).where(inArray(eventReplays.eventRowId, ids))
    expect(audits.length).toBe(replayed.length)
  })

  it('replays only FAILED rows and says what the others are', async () => {
    const done = await seedEvent(database.db, { eventId: 'one-done', status: 'done' })
    const processing = await seedEvent(database.db, { eventId: 'one-processing', status: 'processing' })
    expect(await replayEvent(database.db, done, 'ana')).toEqual({ kind: 'not_failed', status: 'done' })
    expect(await replayEvent(database.db, processing, 'ana')).toEqual({
      kind: 'not_failed',
      status: 'processing',
    })
    expect(await replayEvent(database.db, '00000000-0000-4000-8000-000000000000', 'ana')).toEqual({
      kind: 'not_found',
    })
    const failed = await seedEvent(database.db, { eventId: 'one-failed', status: 'failed', attempts: 5 })
    expect(await replayEvent(database.db, failed, 'ana')).toEqual({ kind: 'replayed', id: failed })
    // A second round: the replay number counts up, the audit keeps both.
    await database.db
      .update(inboundEvents)
      .set({ status: 'failed', attempts: 5 })
      .where(eq(inboundEvents.id, failed))
    expect(await replayEvent(database.db, failed, 'bo')).toEqual({ kind: 'replayed', id: failed })
    const audits = await database.db
      .select({ replay: eventReplays.replay, by: eventReplays.by })
      .from(eventReplays)
      .where(eq(eventReplays.eventRowId, failed))
      .orderBy(eventReplays.replay)
    expect(audits).toEqual([
      { replay: 1, by: 'ana' },
      { replay: 2, by: 'bo' },
    ])
  })
})
