// `npx tsx bench/relay-recovery.ts`: how fast the relay hands back jobs Redis lost. Fills a throwaway
// database with BENCH_ROWS PENDING events (default 20,000, at most 200,000) that were enqueued long
// ago in batch jobs Redis no longer has (as after a FLUSHALL or an evicting Redis), then times one
// orphan pass of the relay against a BullMQ queue of its own on REDIS_URL, and checks that every
// row is carried by a waiting job afterwards. The queue is obliterated at the end.
import { performance } from 'node:perf_hooks'
import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import { noFailpoints } from '../src/failpoints.js'
import { createLogger } from '../src/logger.js'
import { bullmqJobQueue } from '../src/queue/bullmq.js'
import { createEnqueuer } from '../src/queue/enqueuer.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventJobOptions } from '../src/queue/jobs.js'
import { startRelay } from '../src/queue/relay.js'
import { createTestDatabase } from '../test/support/database.js'
import { testRedisUrl } from '../test/support/env.js'
import { uniquePrefix } from '../test/support/stack.js'

const ROWS = Math.min(Number(process.env.BENCH_ROWS ?? 20_000), 200_000)

const database = await createTestDatabase()
const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, enableOfflineQueue: false })
const queue = new Queue<ProcessEventData>(INBOUND_QUEUE, {
  connection,
  prefix: uniquePrefix(),
  defaultJobOptions: processEventJobOptions,
})
try {
  // Rows enqueued two minutes ago in 64-row batch jobs that no longer exist, quiet since.
  await database.sql`
    insert into inbound_events (source, event_id, payload_hash, headers, status, enqueued_at, job_id,
      updated_at, received_at)
    select 'acme', 'evt_' || n, md5(n::text), '{}', 'pending',
      now() - interval '2 minutes', 'evts-lost-' || (n / 64), now() - interval '2 minutes',
      now() - interval '2 minutes' + n * interval '1 microsecond'
    from generate_series(1, ${ROWS}) as n`
  await database.sql`vacuum analyze inbound_events`

  const logger = createLogger('silent')
  const jobs = bullmqJobQueue(queue)
  const enqueuer = createEnqueuer({ queue: jobs, sql: database.sql, logger, failpoints: noFailpoints })
  const relay = startRelay({
    db: database.db,
    queue: jobs,
    enqueuer,
    logger,
    settings: { intervalMs: 3_600_000, graceMs: 60_000, orphanAfterMs: 60_000 },
  })
  await relay.stop()
  const started = performance.now()
  const readded = await relay.tick()
  const seconds = (performance.now() - started) / 1000

  const carried = new Set<string>()
  for (const job of await queue.getJobs(['waiting'], 0, -1)) {
    for (const id of job.data.eventRowIds) carried.add(id)
  }
  console.log(
    `${readded} of ${ROWS} rows re-added in ${seconds.toFixed(2)} s: ${Math.round(readded / seconds)} rows/s; ` +
      `${carried.size} rows in ${await queue.getWaitingCount()} waiting jobs`,
  )
  if (readded !== ROWS || carried.size !== ROWS) process.exitCode = 1
} finally {
  await queue.obliterate({ force: true })
  await queue.close()
  connection.disconnect()
  await database.drop()
}
