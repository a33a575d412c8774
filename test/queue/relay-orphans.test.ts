import { eq, sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { inboundEvents } from '../../src/db/schema.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createLogger } from '../../src/logger.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { createInProcessBackend } from '../../src/queue/in-process.js'
import {
  INBOUND_QUEUE,
  type ProcessEventData,
  processEventJobId,
  processEventJobOptions,
} from '../../src/queue/jobs.js'
import { startRelay } from '../../src/queue/relay.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

/** A row that was enqueued once and has been quiet for two minutes: its job is gone. */
async function orphan(eventId: string): Promise<string> {
  const [claim] = await claimEvents(database.sql, [
    {
      source: 'acme',
      eventId,
      eventType: null,
      payloadHash: 'e'.repeat(64),
      body: Buffer.from('{}'),
      headers: {},
    },
  ])
  const id = claim?.id ?? ''
  await database.db
    .update(inboundEvents)
    .set({ enqueuedAt: sql`now() - interval '2 minutes'`, updatedAt: sql`now() - interval '2 minutes'` })
    .where(eq(inboundEvents.id, id))
  return id
}

describe('relay: orphan recovery', () => {
  it('looks for lost jobs a sixth of orphanAfterMs apart, not on every tick', async () => {
    const backend = createInProcessBackend()
    const queue = backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions)
    const logger = createLogger('silent')
    const enqueuer = createEnqueuer({ queue, sql: database.sql, logger, failpoints: noFailpoints })
    let now = 1_000_000
    const relay = startRelay({
      db: database.db,
      queue,
      enqueuer,
      settings: { intervalMs: 1000, graceMs: 60_000, orphanAfterMs: 60_000 },
      logger,
      clock: () => now,
    })
    // Stopped before its first pass: the test runs the passes itself.
    await relay.stop()

    const first = await orphan('evt_orphan_first')
    expect(await relay.tick()).toBe(1)
    expect(await queue.getJobState(processEventJobId(first))).toBe('waiting')

    const second = await orphan('evt_orphan_second')
    now += 1000
    expect(await relay.tick()).toBe(0)
    expect(await queue.getJobState(processEventJobId(second))).toBe('unknown')

    now += 9_000
    expect(await relay.tick()).toBe(1)
    expect(await queue.getJobState(processEventJobId(second))).toBe('waiting')
    await queue.close()
  })
})
