import { Queue } from 'bullmq'
import { drizzle } from 'drizzle-orm/postgres-js'
import type { Redis } from 'ioredis'
import { quietUnfinishedEvents } from '../db/doctor-queries.js'
import { readDeploymentId } from '../db/migrate.js'
import { withDeadline } from '../deadline.js'
import type { JobState } from '../queue/backend.js'
import { bullmqJobQueue } from '../queue/bullmq.js'
import { dataServers, type RedisConnection } from '../queue/connections.js'
import { INBOUND_QUEUE, processEventJobId, queuePrefixOf } from '../queue/jobs.js'
import { describeMs } from './ledger-checks.js'
import { type CheckOutcome, counted, type DoctorContext, EXAMPLES, found, noFindings } from './types.js'

/** Rows asked about in Redis at most: two small round trips each. */
const QUEUE_CANDIDATES = 200
const REDIS_DEADLINE_MS = 3000

/**
 * How long a row may be without a job before the relay should have given it one again: its grace
 * after the commit, then an orphan period, then the orphan pass that runs a sixth of a period apart
 * (src/queue/relay.ts) and one tick; doubled, so a busy relay is not reported.
 */
export function relayWindowMs(relay: { graceMs: number; orphanAfterMs: number; intervalMs: number }): number {
  return 2 * (relay.graceMs + relay.orphanAfterMs + Math.ceil(relay.orphanAfterMs / 6) + relay.intervalMs)
}

const live = (state: JobState) => state === 'waiting' || state === 'delayed' || state === 'active'

/**
 * PENDING rows (and PROCESSING rows whose lease ran out) quiet for longer than the relay window with
 * no live job in BullMQ, neither the row's own (`evt-<row id>`) nor the batch job it was first
 * enqueued in (`job_id`). The relay re-adds such a row within the window, so one found here means no
 * relay runs, or it keeps failing. The queue prefix is `queue.prefix` or the deployment's own.
 */
export async function pendingWithoutJob(
  context: DoctorContext,
  redis: RedisConnection,
): Promise<CheckOutcome> {
  const { sql, config } = context
  const windowMs = relayWindowMs(config.file.relay)
  const rows = await quietUnfinishedEvents(sql, { quietMs: windowMs, limit: QUEUE_CANDIDATES })
  if (rows.length === 0) return noFindings()
  const prefix = queuePrefixOf({
    configured: config.file.queue.prefix,
    deploymentId: await readDeploymentId(drizzle({ client: sql })),
    redisUrl: context.redisUrl,
  })
  const queue = bullmqJobQueue(new Queue(INBOUND_QUEUE, { connection: redis, prefix }))
  const stateOf = (jobId: string) =>
    withDeadline(
      queue.getJobState(jobId),
      REDIS_DEADLINE_MS,
      `Redis did not answer within ${REDIS_DEADLINE_MS} ms`,
    )
  const lost: string[] = []
  try {
    for (const row of rows) {
      const own = processEventJobId(row.id)
      if (live(await stateOf(own))) continue
      if (row.job_id !== null && row.job_id !== own && live(await stateOf(row.job_id))) continue
      lost.push(row.id)
    }
  } finally {
    // The connection is the caller's: closing a queue on a connection it was given leaves it open.
    await queue.close()
  }
  if (lost.length === 0) return noFindings()
  return found({
    code: 'queue.pending_without_job',
    severity: 'error',
    message: `${counted(lost.length, rows.length >= QUEUE_CANDIDATES)} PENDING row(s) have had no job in the queue (prefix ${prefix}) for over ${describeMs(windowMs)}, longer than the relay takes to re-add one`,
    fix: 'run a worker (`hookledger serve --role worker` or `all`): its relay re-enqueues them; if one runs, read its "relay pass failed" warnings',
    count: lost.length,
    countIsLowerBound: rows.length >= QUEUE_CANDIDATES,
    examples: lost.slice(0, EXAMPLES),
  })
}

/**
 * Redis's eviction policy: BullMQ's keys must never be evicted (a job evicted is a row left to the
 * relay, a lock evicted is a job run twice). CONFIG GET, or INFO memory where CONFIG is renamed away
 * (managed Redis services).
 */
export async function readMaxmemoryPolicy(redis: Redis): Promise<string> {
  try {
    const reply = (await withDeadline(
      redis.config('GET', 'maxmemory-policy'),
      REDIS_DEADLINE_MS,
      'CONFIG GET did not answer',
    )) as unknown
    if (Array.isArray(reply) && typeof reply[1] === 'string') return reply[1]
  } catch {
    // CONFIG may be disabled; INFO says the same.
  }
  const info = await withDeadline(redis.info('memory'), REDIS_DEADLINE_MS, 'INFO memory did not answer')
  const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1]
  if (policy === undefined)
    throw new Error('Redis answered neither CONFIG GET maxmemory-policy nor INFO memory')
  return policy
}

/** Every master of a cluster has its own policy and evicts on its own: each one is read. */
export async function redisEviction(redis: RedisConnection): Promise<CheckOutcome> {
  const servers = await dataServers(redis)
  const evicting: string[] = []
  for (const server of servers) {
    const policy = await readMaxmemoryPolicy(server)
    if (policy === 'noeviction') continue
    evicting.push(servers.length === 1 ? policy : `${server.options.host}:${server.options.port} ${policy}`)
  }
  if (evicting.length === 0) return noFindings()
  const policies = [...new Set(evicting.map((entry) => entry.split(' ').at(-1)))].join(', ')
  return found({
    code: 'redis.eviction',
    severity: 'error',
    message:
      servers.length === 1
        ? `Redis maxmemory-policy is ${policies}: it may evict BullMQ's jobs and locks under memory pressure`
        : `${evicting.length} of ${servers.length} Redis Cluster masters run maxmemory-policy ${policies}: they may evict BullMQ's jobs and locks under memory pressure`,
    fix: 'set `maxmemory-policy noeviction` (redis.conf, or CONFIG SET maxmemory-policy noeviction and CONFIG REWRITE; on a cluster, on every node)',
    count: evicting.length,
    examples: evicting.slice(0, EXAMPLES),
  })
}
