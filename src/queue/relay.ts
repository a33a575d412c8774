import { and, asc, inArray, isNotNull, isNull, lt, sql } from 'drizzle-orm'
import type { ConfigFile } from '../config/config.js'
import type { Database } from '../db/client.js'
import { inboundEvents } from '../db/schema.js'
import { DEFAULT_STUCK_AFTER_MS, watchPass } from '../deadline.js'
import type { Logger } from '../logger.js'
import type { JobQueue } from './backend.js'
import type { Enqueuer } from './enqueuer.js'
import { type ProcessEventData, processEventJob } from './jobs.js'

export interface RelayDependencies {
  db: Database
  queue: JobQueue<ProcessEventData>
  enqueuer: Enqueuer
  settings: ConfigFile['relay']
  logger: Logger
  /** First hand every unfinished row to the queue: set when the queue's jobs died with the last process. */
  resumeAtStart?: boolean
  /** Milliseconds now; tests move it by hand. */
  clock?: () => number
  /** A pass running this long is logged as stuck (every this long until it ends). */
  stuckAfterMs?: number
}

export interface Relay {
  /** One pass; returns how many rows it handed to the queue. Exposed for tests. */
  tick(): Promise<number>
  stop(): Promise<void>
}

const BATCH = 500
const ORPHAN_BATCH = 100
/**
 * The orphan pass reads every unfinished row (a row is an orphan only once it has been quiet for
 * `orphanAfterMs`, which no index can find), ~120 ms for a backlog of 100,000 rows. Run on every tick
 * it took that every second for as long as a big backlog drained, so it runs this many times per
 * `orphanAfterMs` instead: a lost job is found at most a sixth of that period later.
 */
const ORPHAN_PASSES_PER_PERIOD = 6

/**
 * Every committed row ends DONE or FAILED, even when Redis was down at receive time or the process
 * died between the commit and the enqueue: the relay finds such rows in the ledger and enqueues them.
 * Several relays at once are safe: a row's own job id is derived from it, so BullMQ adds that once,
 * and a row in two batch jobs is leased by one of them; the other finds it finished or leased.
 */
export function startRelay(deps: RelayDependencies): Relay {
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()
  let failing = false
  let resume = deps.resumeAtStart === true
  const clock = deps.clock ?? Date.now
  const orphanPassEveryMs = Math.max(
    deps.settings.intervalMs,
    Math.floor(deps.settings.orphanAfterMs / ORPHAN_PASSES_PER_PERIOD),
  )
  let lastOrphanPass = Number.NEGATIVE_INFINITY

  const tick = async () => {
    // Cleared only once the pass succeeds, so a Postgres still starting up gets it retried.
    const resumed = resume ? await resumeUnfinished(deps) : 0
    resume = false
    const enqueued = await enqueueUnqueued(deps)
    const startedAt = clock()
    if (startedAt - lastOrphanPass < orphanPassEveryMs) return resumed + enqueued
    const recovered = await recoverOrphans(deps)
    lastOrphanPass = startedAt
    return resumed + enqueued + recovered
  }

  const loop = () => {
    if (stopped) return
    running = watchPass(tick(), {
      logger: deps.logger,
      loop: 'relay',
      stuckAfterMs: deps.stuckAfterMs ?? DEFAULT_STUCK_AFTER_MS,
    })
      .then(() => {
        if (failing) deps.logger.info('relay recovered')
        failing = false
      })
      .catch((error: unknown) => {
        // Redis or Postgres down: expected during outages; say it once, not every second.
        if (!failing) deps.logger.warn({ err: error }, 'relay pass failed; retrying')
        failing = true
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, deps.settings.intervalMs)
      })
  }
  timer = setTimeout(loop, 0)

  return {
    tick,
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}

/** Rows committed a while ago whose job was never confirmed in the queue. */
async function enqueueUnqueued(deps: RelayDependencies): Promise<number> {
  const rows = await deps.db
    .select({ id: inboundEvents.id })
    .from(inboundEvents)
    .where(
      and(
        sql`${inboundEvents.status} = 'pending'`,
        isNull(inboundEvents.enqueuedAt),
        lt(inboundEvents.receivedAt, sql`now() - ${`${deps.settings.graceMs} milliseconds`}::interval`),
      ),
    )
    .orderBy(asc(inboundEvents.receivedAt))
    .limit(BATCH)
  if (rows.length === 0) return 0
  await deps.enqueuer.add(rows.map((row) => row.id))
  deps.logger.info({ count: rows.length }, 'relay enqueued committed rows that had no job')
  return rows.length
}

/**
 * Rows that should be moving but have been quiet for a long time: their job may be gone (Redis lost
 * its data, or BullMQ gave up on it while Postgres was down). Each one is checked against the queue
 * and re-added when it has no live job.
 */
async function recoverOrphans(deps: RelayDependencies): Promise<number> {
  const quietSince = sql`now() - ${`${deps.settings.orphanAfterMs} milliseconds`}::interval`
  const rows = await deps.db
    .select({ id: inboundEvents.id, jobId: inboundEvents.jobId })
    .from(inboundEvents)
    .where(
      and(
        inArray(inboundEvents.status, ['pending', 'processing']),
        isNotNull(inboundEvents.enqueuedAt),
        // greatest() skips nulls: quiet means no retry is due, no lease is live, nothing changed lately.
        sql`greatest(${inboundEvents.nextAttemptAt}, ${inboundEvents.leaseUntil}, ${inboundEvents.updatedAt}) < ${quietSince}`,
      ),
    )
    .orderBy(asc(inboundEvents.updatedAt))
    .limit(ORPHAN_BATCH)
  const readded = await deps.enqueuer.requeue(rows)
  if (rows.length > 0) {
    // Checked now: look at these rows again only after another quiet period.
    await deps.db
      .update(inboundEvents)
      .set({ updatedAt: sql`now()` })
      .where(
        inArray(
          inboundEvents.id,
          rows.map((row) => row.id),
        ),
      )
  }
  if (readded > 0) deps.logger.warn({ count: readded }, 'relay re-enqueued rows whose job was lost')
  return readded
}

/**
 * The in-process queue starts empty, so every row still owed work gets its job at once instead of
 * `orphanAfterMs` later. A row in backoff keeps its retry time. A PROCESSING row gets a job too: if
 * its lease is live (its holder was likely this process before a crash), processEvent finds it held
 * and looks again when the lease runs out; the row decides, so a live holder is never overtaken.
 */
async function resumeUnfinished(deps: RelayDependencies): Promise<number> {
  let total = 0
  // The cursor keeps received_at as Postgres prints it: a JS Date would drop its microseconds.
  let after: { receivedAt: string; id: string } | undefined
  for (;;) {
    const rows = await deps.db
      .select({
        id: inboundEvents.id,
        receivedAt: sql<string>`${inboundEvents.receivedAt}::text`,
        delayMs: sql<number>`case when ${inboundEvents.status} = 'pending' and ${inboundEvents.nextAttemptAt} > now()
          then ceil(extract(epoch from ${inboundEvents.nextAttemptAt} - now()) * 1000)::int else 0 end`,
      })
      .from(inboundEvents)
      .where(
        and(
          inArray(inboundEvents.status, ['pending', 'processing']),
          after === undefined
            ? undefined
            : sql`(${inboundEvents.receivedAt}, ${inboundEvents.id}) > (${after.receivedAt}::timestamptz, ${after.id}::uuid)`,
        ),
      )
      .orderBy(asc(inboundEvents.receivedAt), asc(inboundEvents.id))
      .limit(BATCH)
    await deps.enqueuer.add(rows.filter((row) => row.delayMs <= 0).map((row) => row.id))
    // Rows in backoff were leased before, so enqueued_at is set already: they need only the job.
    const later = rows.filter((row) => row.delayMs > 0)
    if (later.length > 0) await deps.queue.addBulk(later.map((row) => processEventJob(row.id, row.delayMs)))
    total += rows.length
    const last = rows.at(-1)
    if (last === undefined || rows.length < BATCH) break
    after = { receivedAt: last.receivedAt, id: last.id }
  }
  if (total > 0) deps.logger.info({ count: total }, 'relay resumed the unfinished rows after start')
  return total
}
