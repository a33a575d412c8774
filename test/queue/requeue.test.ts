import { randomUUID } from 'node:crypto'
import { Queue, Worker } from 'bullmq'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
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
    const finished = randomUUID()
    const gone = randomUUID()
    const waiting = randomUUID()
    await enqueuer.add([finished])
    await completeAll([processEventJobId(finished)])
    // A plain add is ignored while the finished job is kept: the reason requeue exists.
    await enqueuer.add([finished])
    expect(await queue.getJobState(processEventJobId(finished))).toBe('completed')

    await queue.add(PROCESS_EVENT, { eventRowIds: [waiting] }, { jobId: processEventJobId(waiting) })
    const waitingJob = await queue.getJob(processEventJobId(waiting))

    expect(await enqueuer.requeue([finished, gone, waiting].map((id) => ({ id })))).toBe(2)
    expect(await queue.getJobState(processEventJobId(finished))).toBe('waiting')
    expect(await queue.getJobState(processEventJobId(gone))).toBe('waiting')
    // The live job is the same one, not a second copy.
    expect((await queue.getJob(processEventJobId(waiting)))?.timestamp).toBe(waitingJob?.timestamp)
    expect(await queue.getWaitingCount()).toBe(3)
  })
})
