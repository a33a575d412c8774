import { randomUUID } from 'node:crypto'
import { eq, inArray, sql } from 'drizzle-orm'
import type postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { type Database, openLedger } from '../../src/db/client.js'
import { inboundEvents } from '../../src/db/schema.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createLogger } from '../../src/logger.js'
import { createBullmqBackend } from '../../src/queue/bullmq.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { createInProcessBackend } from '../../src/queue/in-process.js'
import {
  INBOUND_QUEUE,
  MAX_ROWS_PER_JOB,
  type ProcessEventData,
  processEventJobId,
  processEventJobOptions,
} from '../../src/queue/jobs.js'
import { type RelayDependencies, startRelay } from '../../src/queue/relay.js'
import { freePort } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startRedisServer } from '../support/redis-server.js'
import { uniquePrefix } from '../support/stack.js'
import { claimRows } from '../support/stored-events.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

/** A relay on an in-process queue, stopped before its first pass: each test runs the passes itself. */
async function stoppedRelay(options: Pick<RelayDependencies, 'settings' | 'resumeAtStart' | 'clock'>) {
  const backend = createInProcessBackend()
  const queue = backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions)
  const logger = createLogger('silent')
  const enqueuer = createEnqueuer({ queue, sql: database.sql, logger, failpoints: noFailpoints })
  const relay = startRelay({ db: database.db, queue, enqueuer, logger, ...options })
  await relay.stop()
  return { backend, queue, relay, enqueuer }
}

describe('relay: resuming an in-process queue at start', () => {
  it('hands every unfinished row to the queue in one pass, past its batch size, keeping backoffs', async () => {
    const claims = await claimEvents(
      database.sql,
      Array.from({ length: 1_200 }, (_, i) => ({
        source: 'acme',
        eventId: `evt_resume_${i}`,
        eventType: null,
        payloadHash: 'd'.repeat(64),
        body: Buffer.from('{}'),
        headers: {},
      })),
    )
    const ids = claims.map((claim) => claim.id)
    const [done, processing, backoff] = [ids.slice(0, 100), ids.slice(100, 150), ids.slice(150, 160)]
    // Enqueued long ago (their jobs died with the last process), so orphan recovery alone would wait.
    await database.db.update(inboundEvents).set({ enqueuedAt: sql`now() - interval '1 minute'` })
    await database.db.update(inboundEvents).set({ status: 'done' }).where(inArray(inboundEvents.id, done))
    await database.db
      .update(inboundEvents)
      .set({ status: 'processing', leaseToken: randomUUID(), leaseUntil: sql`now() + interval '1 minute'` })
      .where(inArray(inboundEvents.id, processing))
    await database.db
      .update(inboundEvents)
      .set({ nextAttemptAt: sql`now() + interval '1 minute'`, attempts: 1 })
      .where(inArray(inboundEvents.id, backoff))

    const { backend, queue, relay } = await stoppedRelay({
      settings: { intervalMs: 60_000, graceMs: 60_000, orphanAfterMs: 3_600_000 },
      resumeAtStart: true,
    })
    expect(await relay.tick()).toBe(1_100)
    // The rows due now travel together, up to MAX_ROWS_PER_JOB a job; each row in backoff has its own.
    const { waiting, delayed } = await queue.getJobCounts('waiting', 'delayed')
    expect(delayed).toBe(10)
    expect(waiting).toBeGreaterThanOrEqual(Math.ceil(1_090 / MAX_ROWS_PER_JOB))
    expect(waiting).toBeLessThan(1_090 / 10)
    for (const id of backoff) expect(await queue.getJobState(processEventJobId(id))).toBe('delayed')
    for (const id of done) expect(await queue.getJobState(processEventJobId(id))).toBe('unknown')
    // Once: the next passes find nothing to resume.
    expect(await relay.tick()).toBe(0)

    // Exactly the rows due now are in the waiting jobs, each once.
    const carried: string[] = []
    const processor = backend.process<ProcessEventData>(
      INBOUND_QUEUE,
      async (job) => {
        carried.push(...job.data.eventRowIds)
        return { kind: 'done' }
      },
      { concurrency: 4 },
    )
    const due = ids.filter((id) => !done.includes(id) && !backoff.includes(id))
    await expect.poll(() => carried.length).toBe(due.length)
    expect(new Set(carried)).toEqual(new Set(due))
    await processor.close()
    await queue.close()
  })
})

/** A row that was enqueued once and has been quiet for two minutes: its job is gone. */
async function orphan(eventId: string): Promise<string> {
  const [id = ''] = await claimRows(database.sql, [eventId])
  await database.db
    .update(inboundEvents)
    .set({ enqueuedAt: sql`now() - interval '2 minutes'`, updatedAt: sql`now() - interval '2 minutes'` })
    .where(eq(inboundEvents.id, id))
  return id
}

describe('relay: orphan recovery', () => {
  it('looks for lost jobs a sixth of orphanAfterMs apart, not on every tick', async () => {
    let now = 1_000_000
    const { queue, relay } = await stoppedRelay({
      settings: { intervalMs: 1000, graceMs: 60_000, orphanAfterMs: 60_000 },
      clock: () => now,
    })

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

  it('re-adds every lost row in one pass, chunk after chunk, not a hundred per pass', async () => {
    const { queue, relay } = await stoppedRelay({
      settings: { intervalMs: 1000, graceMs: 60_000, orphanAfterMs: 60_000 },
    })
    const ids = await claimRows(
      database.sql,
      Array.from({ length: 2_500 }, (_, i) => `evt_lost_${i}`),
    )
    // Enqueued two minutes ago in a batch job Redis no longer has.
    await database.sql`
      update inbound_events set enqueued_at = now() - interval '2 minutes', job_id = 'evts-lost',
        updated_at = now() - interval '2 minutes'
      where id = any(${ids}::uuid[])`
    expect(await relay.tick()).toBe(2_500)
    // Together, up to MAX_ROWS_PER_JOB a job: the worker fetches 40 jobs, not 2,500.
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 40 })
    const unrecorded = await database.sql`
      select id from inbound_events where id = any(${ids}::uuid[]) and job_id = 'evts-lost'`
    expect(unrecorded).toHaveLength(0)
    await queue.close()
  })

  it('leaves alone rows whose batch job still waits, however long; re-adds them once that job is gone', async () => {
    let now = 1_000_000
    const { queue, relay, enqueuer } = await stoppedRelay({
      settings: { intervalMs: 1000, graceMs: 60_000, orphanAfterMs: 60_000 },
      clock: () => now,
    })
    const ids = await claimRows(database.sql, ['evt_backlog_a', 'evt_backlog_b', 'evt_backlog_c'])
    await enqueuer.add(ids)
    // A long backlog: the rows wait in their batch job well past orphanAfterMs.
    const age = () => database.sql`
      update inbound_events set updated_at = now() - interval '2 minutes' where id = any(${ids}::uuid[])`
    await age()
    const [row] = await database.sql<{ job_id: string }[]>`
      select distinct job_id from inbound_events where id = any(${ids}::uuid[])`
    const batchJobId = row?.job_id ?? ''
    expect(batchJobId).toMatch(/^evts-/)
    await relay.tick()
    expect(await queue.getJobState(batchJobId)).toBe('waiting')
    for (const id of ids) expect(await queue.getJobState(processEventJobId(id))).toBe('unknown')

    // The batch job lost (Redis lost its data, say): the next pass gives the rows a new job together,
    // recorded on each row, so the pass after that finds them held by it.
    await queue.remove(batchJobId)
    await age()
    now += 10_000
    expect(await relay.tick()).toBe(3)
    const recorded = await database.sql<{ job_id: string }[]>`
      select distinct job_id from inbound_events where id = any(${ids}::uuid[])`
    expect(recorded).toHaveLength(1)
    const newJobId = recorded[0]?.job_id ?? ''
    expect(newJobId).toMatch(/^evts-/)
    expect(newJobId).not.toBe(batchJobId)
    expect(await queue.getJobState(newJobId)).toBe('waiting')
    await age()
    now += 10_000
    expect(await relay.tick()).toBe(0)
    await queue.close()
  })
})

describe('relay: a Redis that lost its data', () => {
  it('a relay whose resume pass fails leaves the store unmarked: the next relay resumes in its place', async () => {
    const redis = await startRedisServer()
    const logger = createLogger('silent')
    const backend = createBullmqBackend({ url: redis.url, prefix: uniquePrefix(), logger })
    // Its producer has no offline queue: a command before it connected fails ("Stream isn't
    // writeable"), as the first storeEmptied below did on a busy host. inspect() waits for it.
    await backend.inspect()
    const queue = backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions)
    // A database that refuses connections: the resume pass of this relay fails, as one whose
    // process died before it committed never finishes.
    const unreachable = openLedger(`postgres://postgres@127.0.0.1:${await freePort()}/nowhere`, { max: 1 })
    const settings = { intervalMs: 60_000, graceMs: 60_000, orphanAfterMs: 3_600_000 }
    const store = { emptied: () => backend.storeEmptied(), mark: () => backend.markStore() }
    const relayOn = async (ledger: { db: Database; sql: postgres.Sql }) => {
      const enqueuer = createEnqueuer({ queue, sql: ledger.sql, logger, failpoints: noFailpoints })
      const relay = startRelay({ db: ledger.db, queue, enqueuer, logger, settings, store })
      await relay.stop()
      return relay
    }
    try {
      const ids = await claimRows(
        database.sql,
        Array.from({ length: 30 }, (_, i) => `evt_unmarked_${i}`),
      )
      // Enqueued a minute ago: their jobs went with Redis's data, and no orphan pass is due.
      await database.db
        .update(inboundEvents)
        .set({ enqueuedAt: sql`now() - interval '1 minute'` })
        .where(inArray(inboundEvents.id, ids))
      expect(await backend.storeEmptied()).toBe(true)

      const failing = await relayOn(unreachable)
      await expect(failing.tick()).rejects.toThrow()
      expect(await backend.storeEmptied()).toBe(true)

      const healthy = await relayOn(database)
      expect(await healthy.tick()).toBeGreaterThanOrEqual(ids.length)
      const [bullmqQueue] = backend.queues()
      const waiting = (await bullmqQueue?.getJobs(['waiting'])) ?? []
      const carried = waiting.flatMap((job) => (job.data as ProcessEventData).eventRowIds)
      expect(carried).toEqual(expect.arrayContaining(ids))
      expect(await backend.storeEmptied()).toBe(false)
      // Marked: the next pass resumes nothing.
      expect(await healthy.tick()).toBe(0)
    } finally {
      await unreachable.close()
      await queue.close()
      await backend.close()
      await redis.stop()
    }
  })
})
