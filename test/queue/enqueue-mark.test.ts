import { randomUUID } from 'node:crypto'
import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { leaseEvents } from '../../src/db/events.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createLogger } from '../../src/logger.js'
import { bullmqJobQueue } from '../../src/queue/bullmq.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { INBOUND_QUEUE, type ProcessEventData } from '../../src/queue/jobs.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testRedisUrl } from '../support/env.js'
import { uniquePrefix } from '../support/stack.js'
import { claimRows } from '../support/stored-events.js'

let database: TestDatabase
let connection: Redis
let queue: Queue<ProcessEventData>

beforeAll(async () => {
  database = await createTestDatabase()
  connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, enableOfflineQueue: false })
  queue = new Queue<ProcessEventData>(INBOUND_QUEUE, { connection, prefix: uniquePrefix() })
})
afterAll(async () => {
  await queue.obliterate({ force: true })
  await queue.close()
  connection.disconnect()
  await database.drop()
})

const enqueuerWith = (markDelayMs: number) =>
  createEnqueuer({
    queue: bullmqJobQueue(queue),
    sql: database.sql,
    logger: createLogger('silent'),
    failpoints: noFailpoints,
    markDelayMs,
  })

/** The job that carries the row, once Redis holds it. */
async function jobOf(id: string): Promise<string> {
  for (let i = 0; i < 200; i += 1) {
    const jobs = await queue.getJobs(['waiting'])
    const job = jobs.find((candidate) => candidate.data.eventRowIds.includes(id))
    if (job?.id !== undefined) return job.id
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`no job for row ${id}`)
}

const rowsOf = (ids: string[]) =>
  database.sql<Array<{ id: string; version: string; enqueued: boolean; job_id: string | null }>>`
    select id, xmin::text as version, enqueued_at is not null as enqueued, job_id from inbound_events
    where id = any(${ids}::uuid[]) order by array_position(${ids}::uuid[], id)`

describe('the intake marks its rows enqueued a while after adding their jobs', () => {
  it('and leaves a row that a worker leased meanwhile as the lease wrote it', async () => {
    const enqueuer = enqueuerWith(400)
    const [leased = '', waiting = ''] = await claimRows(database.sql, ['evt_mark_leased', 'evt_mark_waiting'])
    enqueuer.enqueue(leased)
    enqueuer.enqueue(waiting)
    const jobId = await jobOf(leased)
    expect(await jobOf(waiting)).toBe(jobId)
    expect((await rowsOf([leased, waiting])).map((row) => row.enqueued)).toEqual([false, false])

    const [lease] = await leaseEvents(database.sql, [{ id: leased, token: randomUUID(), jobId }], 60_000)
    expect(lease?.kind).toBe('leased')
    const [afterLease] = await rowsOf([leased])
    expect(afterLease).toMatchObject({ job_id: jobId, enqueued: true })

    await expect.poll(async () => (await rowsOf([waiting]))[0]?.enqueued).toBe(true)
    const [leasedRow, waitingRow] = await rowsOf([leased, waiting])
    // The same version: the mark wrote nothing to the leased row.
    expect(leasedRow).toEqual(afterLease)
    expect(waitingRow).toMatchObject({ job_id: jobId, enqueued: true })
    await enqueuer.drain()
  })

  it('at once when the process shuts down (drain), not after the delay', async () => {
    const enqueuer = enqueuerWith(60_000)
    const [id = ''] = await claimRows(database.sql, ['evt_mark_drained'])
    enqueuer.enqueue(id)
    const jobId = await jobOf(id)
    const startedAt = Date.now()
    await enqueuer.drain()
    expect(Date.now() - startedAt).toBeLessThan(5000)
    expect((await rowsOf([id]))[0]).toMatchObject({ job_id: jobId, enqueued: true })
  })
})
