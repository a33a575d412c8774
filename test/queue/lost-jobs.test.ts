import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { INBOUND_QUEUE, PROCESS_EVENT, processEventJob } from '../../src/queue/jobs.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { captureLogs } from '../support/log-capture.js'
import { startRedisServer } from '../support/redis-server.js'
import { FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'

// Redis loses every job (FLUSHALL: a failover to an empty replica, an evicting Redis, an operator's
// mistake) after the api accepted 3,000 events and before any worker ran them. The ledger has every
// row; the relay must hand all of them back at the ledger's speed, not 100 rows per orphan pass.

const EVENTS = 3_000
const SENDERS = 24
const ORPHAN_AFTER_MS = 20_000
/** The brief: all of them forwarded within a minute of the flush (the orphan window is 20 s of it). */
const RECOVERY_BUDGET_MS = 60_000
/** Jobs whose hash Redis lost while their id stayed queued, as an evicting Redis leaves them. */
const HOLLOW_JOBS = 40

let database: TestDatabase
let redis: Awaited<ReturnType<typeof startRedisServer>>
let sink: Awaited<ReturnType<typeof startSink>>
const forwarded = new Set<string>()

beforeAll(async () => {
  database = await createTestDatabase()
  redis = await startRedisServer()
  sink = await startSink((request) => {
    const id = request.headers['x-hookledger-event-id']
    if (typeof id === 'string') forwarded.add(id)
    return { status: 200, body: 'ok' }
  })
})
afterAll(async () => {
  await sink.close()
  await redis.stop()
  await database.drop()
})

function config() {
  return testConfig(
    {
      worker: { ...FAST_WORKER, concurrency: 16 },
      relay: { intervalMs: 200, graceMs: 300, orphanAfterMs: ORPHAN_AFTER_MS },
    },
    { handler: { type: 'forward', url: sink.url, timeoutMs: 5000 } },
  )
}

async function deliverAll(url: string): Promise<void> {
  let next = 0
  const sender = async () => {
    while (next < EVENTS) {
      const eventId = `evt_lost_${next}`
      next += 1
      const body = JSON.stringify({ type: 'order.paid', eventId })
      const response = await fetch(`${url}/webhooks/acme`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: eventId }),
      })
      expect(response.status).toBe(200)
      await response.arrayBuffer()
    }
  }
  await Promise.all(Array.from({ length: SENDERS }, sender))
}

describe('jobs lost in Redis', () => {
  it('3,000 flushed jobs are all forwarded within a minute of the flush; hollow jobs are dropped quietly', async () => {
    let api: TestService | undefined
    let worker: TestService | undefined
    const { logger, entries } = captureLogs('info')
    const probe = new Redis(redis.url, { maxRetriesPerRequest: 1 })
    try {
      api = await startTestService({ database, redisUrl: redis.url, role: 'api', config: config() })
      await deliverAll(api.url)
      // Every row reached its job in Redis: only a loss in Redis can leave one without.
      await expect
        .poll(
          async () =>
            (await database.sql`select count(*)::int as n from inbound_events where enqueued_at is null`)[0]
              ?.n,
          {
            timeout: 20_000,
          },
        )
        .toBe(0)
      expect(await probe.flushall()).toBe('OK')
      const flushedAt = Date.now()
      // The marker whose absence tells a relay that Redis lost everything is put back: this loss is
      // then found as an evicting Redis's is, job by job, by the orphan pass (the case below is the
      // marker's).
      await probe.set(`${api.service.queuePrefix}:hookledger:store-marker`, String(flushedAt))

      // What an evicting Redis leaves: a job id still queued whose hash (its data) is gone.
      const queue = new Queue(INBOUND_QUEUE, { connection: probe, prefix: api.service.queuePrefix })
      const hollow = Array.from({ length: HOLLOW_JOBS }, (_, i) =>
        processEventJob(`00000000-0000-4000-8000-${String(i).padStart(12, '0')}`),
      )
      await queue.addBulk(hollow.map((job) => ({ name: PROCESS_EVENT, data: job.data, opts: job.opts })))
      for (const job of hollow)
        await probe.del(`${api.service.queuePrefix}:${INBOUND_QUEUE}:${job.opts.jobId}`)
      await queue.close()

      worker = await startTestService({
        database,
        redisUrl: redis.url,
        role: 'worker',
        config: config(),
        logger,
      })
      await expect
        .poll(() => forwarded.size, { timeout: RECOVERY_BUDGET_MS - (Date.now() - flushedAt), interval: 250 })
        .toBe(EVENTS)
      const recoveredMs = Date.now() - flushedAt
      console.info(
        `${EVENTS} flushed jobs forwarded ${recoveredMs} ms after the flush (orphan window ${ORPHAN_AFTER_MS} ms)`,
      )
      const passes = entries().filter((line) => line.msg === 'relay re-enqueued rows whose job was lost')
      console.info(passes.map(({ count, checked, ms }) => ({ count, checked, ms })))
      expect(recoveredMs).toBeLessThan(RECOVERY_BUDGET_MS)
      await expect
        .poll(
          async () =>
            (await database.sql`select count(*)::int as n from inbound_events where status = 'done'`)[0]?.n,
          {
            timeout: 10_000,
          },
        )
        .toBe(EVENTS)

      // Hollow jobs are not failures of anything: no line each, one summary line per interval.
      const lines = entries()
      expect(
        lines.filter((line) => line.msg === 'job failed; the relay re-enqueues its row if needed'),
      ).toEqual([])
      await expect
        .poll(
          () =>
            entries()
              .filter(
                (line) => line.msg === 'dropped jobs whose data Redis lost; the relay re-enqueues their rows',
              )
              .reduce((sum, line) => sum + Number(line.jobs ?? 0), 0),
          { timeout: 15_000 },
        )
        .toBe(HOLLOW_JOBS)
    } finally {
      probe.disconnect()
      await worker?.close()
      await api?.close()
    }
  }, 150_000)

  it('a flush while the worker runs is noticed at its next relay pass, not one orphan period later', async () => {
    const events = 200
    const { logger, entries } = captureLogs('info')
    const received = new Set<string>()
    // The destination holds every forward until the flush, so most rows wait in Redis's jobs.
    let release: () => void = () => {}
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    const held = await startSink(async (request) => {
      await released
      const id = request.headers['x-hookledger-event-id']
      if (typeof id === 'string') received.add(id)
      return { status: 200, body: 'ok' }
    })
    const flushed = await createTestDatabase()
    const probe = new Redis(redis.url, { maxRetriesPerRequest: 1 })
    let service: TestService | undefined
    try {
      service = await startTestService({
        database: flushed,
        redisUrl: redis.url,
        logger,
        config: testConfig(
          {
            worker: { ...FAST_WORKER, concurrency: 2 },
            // Ten minutes: an orphan pass could not find these rows within the test.
            relay: { intervalMs: 200, graceMs: 300, orphanAfterMs: 600_000 },
          },
          { handler: { type: 'forward', url: held.url, timeoutMs: 30_000 } },
        ),
      })
      for (let i = 0; i < events; i += 1) {
        const eventId = `evt_flushed_${i}`
        const body = JSON.stringify({ type: 'order.paid', eventId })
        const response = await fetch(`${service.url}/webhooks/acme`, {
          method: 'POST',
          body,
          headers: signedHeaders(body, { id: eventId }),
        })
        expect(response.status).toBe(200)
        await response.arrayBuffer()
      }
      await expect
        .poll(
          async () =>
            (await flushed.sql`select count(*)::int as n from inbound_events where enqueued_at is null`)[0]
              ?.n,
          { timeout: 20_000 },
        )
        .toBe(0)
      const noticedBefore = entries().filter((line) =>
        String(line.msg).startsWith("the queue's Redis holds none"),
      )
      expect(await probe.flushall()).toBe('OK')
      const flushedAt = Date.now()
      release()
      await expect.poll(() => received.size, { timeout: 20_000, interval: 250 }).toBe(events)
      console.info(
        `${events} rows whose jobs a FLUSHALL took forwarded ${Date.now() - flushedAt} ms after it`,
      )
      const noticed = entries().filter((line) => String(line.msg).startsWith("the queue's Redis holds none"))
      expect(noticed.length - noticedBefore.length).toBe(1)
      expect(await probe.get(`${service.service.queuePrefix}:hookledger:store-marker`)).not.toBeNull()
    } finally {
      release()
      probe.disconnect()
      await service?.close()
      await held.close()
      await flushed.drop()
    }
  }, 90_000)
})
