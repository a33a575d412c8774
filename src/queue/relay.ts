import type { ConfigFile } from '../config/config.js'
import type { Database } from '../db/client.js'
import {
  claimQuietEvents,
  markQuiet,
  type RelayCursor,
  unfinishedEventsAfter,
  unqueuedEventsAfter,
} from '../db/relay-queries.js'
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
  /**
   * Asked before each pass: whether the queue's store lost its data (a flushed or restarted Redis).
   * The pass then hands every unfinished row to the queue, as at start, instead of finding them one
   * orphan period later, and only then marks the store (`mark`): a relay that dies before its
   * pass committed leaves the store unmarked, so the next pass of any process resumes in its place.
   * Two relays that both see it resume the same rows, which costs a second job per row, whose run
   * finds the row finished or leased. BullMQ's backend only.
   */
  store?: { emptied(): Promise<boolean>; mark(): Promise<void> }
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

/**
 * Rows one statement reads, one `addBulk` takes (as jobs of up to 64 rows) and one round of queue
 * questions covers. A pass goes on chunk after chunk until no row is left, so it hands the queue a
 * backlog at the speed Redis and the ledger take it, in steps bounded in memory and in time.
 */
const CHUNK = 1000
/**
 * The orphan pass reads every unfinished row (a row is an orphan only once it has been quiet for
 * `orphanAfterMs`, which no index can find), ~120 ms for a backlog of 100,000 rows. Run on every tick
 * it took that every second for as long as a big backlog drained, so it runs this many times per
 * `orphanAfterMs` instead: a lost job is found at most a sixth of that period later.
 */
const ORPHAN_PASSES_PER_PERIOD = 6

/**
 * Every committed row ends DONE or FAILED, even when Redis was down at receive time, lost its data,
 * or the process died between the commit and the enqueue: the relay finds such rows in the ledger
 * and enqueues them, all of them in each pass. Several relays at once are safe: the orphan pass
 * claims the rows it checks (SKIP LOCKED), and a row in two jobs is leased by one of them; the other
 * finds it finished or leased.
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
  // stop() ends the pass under way after its current chunk; a pass run by hand afterwards runs whole.
  let interrupted = false
  const stopping = () => interrupted

  // Said once per loss: a pass that fails before it marks the store finds it unmarked again.
  let storeLossLogged = false
  const tick = async () => {
    interrupted = false
    const storeEmptied = deps.store !== undefined && (await deps.store.emptied())
    if (storeEmptied && !storeLossLogged) {
      deps.logger.warn(
        "the queue's Redis holds none of its data (flushed, restarted or new): handing every unfinished row to the queue",
      )
      storeLossLogged = true
    }
    // Cleared only once the pass succeeds, so a Postgres still starting up gets it retried.
    const resumed = resume || storeEmptied ? await resumeUnfinished(deps) : 0
    resume = false
    if (storeEmptied) {
      await deps.store?.mark()
      storeLossLogged = false
    }
    const enqueued = await enqueueUnqueued(deps, stopping)
    const startedAt = clock()
    if (startedAt - lastOrphanPass < orphanPassEveryMs) return resumed + enqueued
    const recovered = await recoverOrphans(deps, stopping)
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
      interrupted = true
      clearTimeout(timer)
      await running
    },
  }
}

/** Rows committed a while ago whose job was never confirmed in the queue: all of them, chunk by chunk. */
async function enqueueUnqueued(deps: RelayDependencies, stopping: () => boolean): Promise<number> {
  const startedAt = Date.now()
  let total = 0
  let cursor: RelayCursor | undefined
  while (!stopping()) {
    const rows = await unqueuedEventsAfter(deps.db, {
      graceMs: deps.settings.graceMs,
      after: cursor,
      limit: CHUNK,
    })
    // A row that had a job before may still have it, waiting out a delay (a paused delivery whose
    // route was re-enabled) or kept finished under the row's own id (a replay): requeue makes either
    // run now, where an add under that id would be ignored. A row never enqueued needs only the add.
    const fresh = rows.filter((row) => row.jobId === null).map((row) => row.id)
    const again = rows.filter((row) => row.jobId !== null)
    if (fresh.length > 0) await deps.enqueuer.add(fresh)
    total += fresh.length + (again.length > 0 ? await deps.enqueuer.requeue(again) : 0)
    const last = rows.at(-1)
    if (last === undefined || rows.length < CHUNK) break
    cursor = { receivedAt: last.receivedAt, id: last.id }
  }
  if (total > 0) {
    deps.logger.info(
      { count: total, ms: Date.now() - startedAt },
      'relay enqueued committed rows that had no job',
    )
  }
  return total
}

/**
 * Rows that should be moving but have been quiet for a long time: their job may be gone (Redis lost
 * its data, or BullMQ gave up on it while Postgres was down). Each one is checked against the queue
 * and re-added when it has no live job; every quiet row in one pass, a chunk at a time.
 */
async function recoverOrphans(deps: RelayDependencies, stopping: () => boolean): Promise<number> {
  const startedAt = Date.now()
  let checked = 0
  let readded = 0
  let cursor: RelayCursor | undefined
  const quietMs = deps.settings.orphanAfterMs
  while (!stopping()) {
    const rows = await claimQuietEvents(deps.db, { quietMs, after: cursor, limit: CHUNK })
    try {
      readded += await deps.enqueuer.requeue(rows.map((row) => ({ id: row.id, jobId: row.jobId })))
    } catch (error) {
      // Not handed on after all: quiet again, so the next pass (a sixth of the period away) retries.
      await markQuiet(
        deps.db,
        rows.map((row) => row.id),
        quietMs,
      ).catch(() => {})
      throw error
    }
    checked += rows.length
    const last = rows.at(-1)
    if (last === undefined || rows.length < CHUNK) break
    cursor = { receivedAt: last.receivedAt, id: last.id }
  }
  if (readded > 0) {
    deps.logger.warn(
      { count: readded, checked, ms: Date.now() - startedAt },
      'relay re-enqueued rows whose job was lost',
    )
  }
  return readded
}

/**
 * The in-process queue starts empty, and so does a Redis that lost its data: every row still owed
 * work gets its job at once instead of `orphanAfterMs` later. A row in backoff keeps its retry time.
 * A PROCESSING row gets a job too: if its lease is live (its holder is another worker, or was this
 * process before a crash), processEvent finds it held and looks again when the lease runs out; the
 * row decides, so a live holder is never overtaken. A row whose job Redis still has gets a second
 * one, which finds the row finished or held.
 */
async function resumeUnfinished(deps: RelayDependencies): Promise<number> {
  let total = 0
  let cursor: RelayCursor | undefined
  for (;;) {
    const rows = await unfinishedEventsAfter(deps.db, { after: cursor, limit: CHUNK })
    await deps.enqueuer.add(rows.filter((row) => row.delayMs <= 0).map((row) => row.id))
    // Rows in backoff were leased before, so enqueued_at is set already: they need only the job.
    const later = rows.filter((row) => row.delayMs > 0)
    if (later.length > 0) await deps.queue.addBulk(later.map((row) => processEventJob(row.id, row.delayMs)))
    total += rows.length
    const last = rows.at(-1)
    if (last === undefined || rows.length < CHUNK) break
    cursor = { receivedAt: last.receivedAt, id: last.id }
  }
  if (total > 0) deps.logger.info({ count: total }, 'relay resumed the unfinished rows')
  return total
}
