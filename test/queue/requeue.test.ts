import { Queue, Worker } from 'bullmq'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createLogger } from '../../src/logger.js'
import { bullmqJobQueue } from '../../src/queue/bullmq.js'
import { createEnqueuer, type Enqueuer } from '../../src/queue/enqueuer.js'
import {
  INBOUND_QUEUE,
  PROCESS_EVENT,
  type ProcessEventData,
  processEventJobId,
} from '../../src/queue/jobs.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testRedisUrl } from '../support/env.js'
import { startRedisServer } from '../support/redis-server.js'
import { uniquePrefix } from '../support/stack.js'

let database: TestDatabase
let connection: Redis
let queue: Queue<ProcessEventData>
let enqueuer: Enqueuer
const prefix = uniquePrefix()

beforeAll(async () => {
  database = await createTestDatabase()
  connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, enableOfflineQueue: false })
  queue = new Queue<ProcessEventData>(INBOUND_QUEUE, { connection, prefix })
  enqueuer = createEnqueuer({
    queue: bullmqJobQueue(queue),
    sql: database.sql,
    logger: createLogger('silent'),
    failpoints: noFailpoints,
  })
})
afterAll(async () => {
  await queue.obliterate({ force: true })
  await queue.close()
  connection.disconnect()
  await database.drop()
})

/** Runs the queue's jobs to completion with a processor that does nothing. */
async function completeAll(jobIds: string[]) {
  const workerConnection = new Redis(testRedisUrl(), { maxRetriesPerRequest: null })
  const worker = new Worker(INBOUND_QUEUE, async () => {}, { connection: workerConnection, prefix })
  try {
    for (let i = 0; i < 200; i += 1) {
      const states = await Promise.all(jobIds.map((id) => queue.getJobState(id)))
      if (states.every((state) => state === 'completed')) return
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
    throw new Error('jobs did not complete')
  } finally {
    await worker.close()
    workerConnection.disconnect()
  }
}

describe('Enqueuer.requeue', () => {
  it('re-adds rows whose job finished or is gone, and leaves a live job alone', async () => {
    const [finished = '', gone = '', waiting = ''] = (
      await claimEvents(
        database.sql,
        ['evt_finished', 'evt_gone', 'evt_waiting'].map((eventId) => ({
          source: 'acme',
          eventId,
          eventType: null,
          payloadHash: 'f'.repeat(64),
          body: Buffer.from('{}'),
          headers: {},
        })),
      )
    ).map((claim) => claim.id)
    await enqueuer.add([finished])
    await completeAll([processEventJobId(finished)])
    // A plain add is ignored while the finished job is kept: the reason requeue exists.
    await enqueuer.add([finished])
    expect(await queue.getJobState(processEventJobId(finished))).toBe('completed')

    await queue.add(PROCESS_EVENT, { eventRowIds: [waiting] }, { jobId: processEventJobId(waiting) })
    const waitingJob = await queue.getJob(processEventJobId(waiting))

    expect(await enqueuer.requeue([finished, gone, waiting].map((id) => ({ id })))).toBe(2)
    // The two re-added rows travel together, and each row records the job that now carries it.
    const rows = await database.sql<{ id: string; job_id: string }[]>`
      select id, job_id from inbound_events where id = any(${[finished, gone]}::uuid[])`
    expect(new Set(rows.map((row) => row.job_id)).size).toBe(1)
    const batchJobId = rows[0]?.job_id ?? ''
    expect(await queue.getJobState(batchJobId)).toBe('waiting')
    expect((await queue.getJob(batchJobId))?.data.eventRowIds.sort()).toEqual([finished, gone].sort())
    // The finished job kept under the row's own id is gone, so a later add under that id is not ignored.
    expect(await queue.getJobState(processEventJobId(finished))).toBe('unknown')
    // The live job is the same one, not a second copy.
    expect((await queue.getJob(processEventJobId(waiting)))?.timestamp).toBe(waitingJob?.timestamp)
    expect(await queue.getWaitingCount()).toBe(2)

    // Held by the job recorded on it; once that is gone too, a row alone gets its own job back.
    expect(await enqueuer.requeue([{ id: finished, jobId: batchJobId }])).toBe(0)
    await queue.remove(batchJobId)
    expect(await enqueuer.requeue([{ id: finished, jobId: batchJobId }])).toBe(1)
    expect(await queue.getJobState(processEventJobId(finished))).toBe('waiting')
  })

  it('leaves rows whose lost job a full Redis would not take back as unqueued, for the gauge and the relay', async () => {
    const redis = await startRedisServer(undefined, ['--maxmemory-policy', 'noeviction'])
    const full = new Redis(redis.url, { maxRetriesPerRequest: 1 })
    const fullQueue = new Queue<ProcessEventData>(INBOUND_QUEUE, { connection: full, prefix: uniquePrefix() })
    try {
      const ids = (
        await claimEvents(
          database.sql,
          ['evt_full_1', 'evt_full_2'].map((eventId) => ({
            source: 'acme',
            eventId,
            eventType: null,
            payloadHash: 'a'.repeat(64),
            body: Buffer.from('{}'),
            headers: {},
          })),
        )
      ).map((claim) => claim.id)
      // Enqueued a while ago in a job Redis no longer has.
      await database.sql`
        update inbound_events set enqueued_at = now() - interval '2 minutes', job_id = 'evts-gone'
        where id = any(${ids}::uuid[])`
      const onFull = createEnqueuer({
        queue: bullmqJobQueue(fullQueue),
        sql: database.sql,
        logger: createLogger('silent'),
        failpoints: noFailpoints,
      })
      await fullQueue.getJobCounts('waiting') // BullMQ's scripts loaded while there is room
      for (let i = 0; i < 4; i += 1) await full.set(`filler:${i}`, 'x'.repeat(256 * 1024))
      await full.config('SET', 'maxmemory', '1mb')

      await expect(onFull.requeue(ids.map((id) => ({ id, jobId: 'evts-gone' })))).rejects.toThrow(/OOM/)
      const unqueued = await database.sql`
        select id from inbound_events where id = any(${ids}::uuid[]) and enqueued_at is null`
      expect(unqueued).toHaveLength(2)
    } finally {
      await fullQueue.close()
      full.disconnect()
      await redis.stop()
    }
  })
})
