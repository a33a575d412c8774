import type postgres from 'postgres'
import { type EnqueuedRow, markEnqueued, markRequeued, markUnqueued } from '../db/events.js'
import { withDeadline } from '../deadline.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import type { JobQueue, JobState, JobToAdd } from './backend.js'
import { type ProcessEventData, processEventJobId, processEventsJobs } from './jobs.js'

const ADD_DEADLINE_MS = 2000
const FAILURE_LOG_EVERY_MS = 30_000

/** A row to requeue, with the job it was first enqueued in when known (inbound_events.job_id). */
export interface RequeuedRow {
  id: string
  jobId?: string | null | undefined
}

/** Adds jobs for committed rows. Used by the HTTP path (after the response) and by the relay. */
export interface Enqueuer {
  /**
   * Fire and forget: batches the rows of concurrent requests into one `addBulk`, after handing this
   * process's worker those it has room for now (`runHere`); never throws.
   */
  enqueue(eventRowId: string): void
  /**
   * Adds jobs now, the rows together (see `processEventsJobs`); throws when Redis does not take them
   * (the relay tries again on its next tick).
   */
  add(eventRowIds: readonly string[]): Promise<void>
  /**
   * Adds jobs again for rows that must run now (a lost job, a replay, a route re-enabled), together
   * as `add` does, and records each row's new job. A row with a live job, its own or the one recorded
   * on it (`jobId`), keeps that job, which will find the row PENDING, unless the live one is its own
   * job waiting out a delay: that one is removed and added again, undelayed. A finished job kept under
   * a row's own id is removed first too: BullMQ silently ignores an add under an id it holds. Returns
   * how many rows got a new job; throws like `add`.
   */
  requeue(rows: readonly RequeuedRow[]): Promise<number>
  /** Waits for adds already under way, and makes their enqueue marks now (shutdown). */
  drain(): Promise<void>
}

/** What addJobs records once Redis took the jobs: markEnqueued now or after `markDelayMs`, or markRequeued. */
type Mark = 'now' | 'later' | 'requeued'

export function createEnqueuer(deps: {
  queue: JobQueue<ProcessEventData>
  /** Where the marks are written: a ledger view's `genericPlans` (each mark is one batched statement). */
  sql: postgres.Sql
  logger: Logger
  failpoints: Failpoints
  /**
   * How long `enqueue` waits after Redis took a job before marking its rows enqueued. A worker that
   * leases a row meanwhile marks it with the lease, and the mark then finds nothing to write: the
   * third rewrite of the row and its index entries are saved whenever workers keep up. Keep it under
   * the relay's grace (the service takes half of it), so the relay does not take a row waiting for
   * its mark for one without a job. 0: at once.
   */
  markDelayMs?: number
  /**
   * Starts a row in this process's own worker when a place has come free since its claim
   * (Worker.runHere), instead of adding a job for it. Most rows a process both claims and works were
   * claimed already leased (Worker.reserveHere) and never come here; these are the ones claimed
   * PENDING because every place was taken then. Absent in a process without a worker.
   */
  runHere?: (eventRowId: string) => boolean
}): Enqueuer {
  let batch: string[] = []
  let lastFailureLog = Number.NEGATIVE_INFINITY
  let unlogged = 0
  const inFlight = new Set<Promise<void>>()
  /** Marks waiting for their delay, each with the call that makes it now. */
  const delayedMarks = new Set<() => void>()
  let draining = false

  const afterMarkDelay = () =>
    new Promise<void>((resolve) => {
      const now = () => {
        clearTimeout(timer)
        delayedMarks.delete(now)
        resolve()
      }
      const timer = setTimeout(now, deps.markDelayMs ?? 0)
      delayedMarks.add(now)
    })

  const addJobs = async (jobs: readonly JobToAdd<ProcessEventData>[], mark: Mark) => {
    const rows: EnqueuedRow[] = jobs.flatMap((job) =>
      job.data.eventRowIds.map((id) => ({ id, jobId: String(job.opts?.jobId) })),
    )
    if (rows.length === 0) return
    // BullMQ waits for a connection that is not there yet; a dead Redis must fail this, not park it.
    await withDeadline(
      deps.queue.addBulk(jobs),
      ADD_DEADLINE_MS,
      `Redis did not take ${jobs.length} job(s) for ${rows.length} row(s) within ${ADD_DEADLINE_MS} ms`,
    )
    if (mark === 'requeued') return markRequeued(deps.sql, rows)
    if (mark === 'later' && (deps.markDelayMs ?? 0) > 0 && !draining) await afterMarkDelay()
    await markEnqueued(deps.sql, rows)
  }
  const add = (ids: readonly string[]) => addJobs(processEventsJobs(ids), 'now')
  const stateOf = (jobId: string) =>
    withDeadline(
      deps.queue.getJobState(jobId),
      ADD_DEADLINE_MS,
      `Redis did not answer the state of job ${jobId} within ${ADD_DEADLINE_MS} ms`,
    )
  const finished = (state: JobState) => state === 'completed' || state === 'failed' || state === 'unknown'

  const flush = () => {
    const ids = batch
    batch = []
    if (deps.failpoints.isArmed('receive.before_enqueue')) {
      // Crash test: die once the response is surely written, with the job never added.
      setTimeout(() => deps.failpoints.hit('receive.before_enqueue'), 200)
      return
    }
    const queued = deps.runHere === undefined ? ids : ids.filter((id) => !deps.runHere?.(id))
    if (queued.length === 0) return
    const done = addJobs(processEventsJobs(queued), 'later')
      .catch((error: unknown) => {
        // A Redis that is down or full fails every request's enqueue: one line per interval, with
        // the rows since the last, not one per request (the relay enqueues them all).
        unlogged += queued.length
        if (Date.now() - lastFailureLog < FAILURE_LOG_EVERY_MS) return
        lastFailureLog = Date.now()
        deps.logger.warn({ err: error, count: unlogged }, 'enqueue failed; the relay will enqueue these rows')
        unlogged = 0
      })
      .finally(() => inFlight.delete(done))
    inFlight.add(done)
  }

  // Every question of a call is asked at once: ioredis sends them without waiting for each answer,
  // so a chunk of a thousand rows costs a few round trips, not two thousand (100 rows per 10 s before).
  const requeue = async (rows: readonly RequeuedRow[]) => {
    const recordedJob = (row: RequeuedRow) =>
      row.jobId != null && row.jobId !== processEventJobId(row.id) ? row.jobId : undefined
    const recorded = [...new Set(rows.flatMap((row) => recordedJob(row) ?? []))]
    const recordedStates = new Map(
      await Promise.all(recorded.map(async (jobId) => [jobId, await stateOf(jobId)] as const)),
    )
    const unheld = rows.filter((row) => {
      const jobId = recordedJob(row)
      const state = jobId === undefined ? undefined : recordedStates.get(jobId)
      return state === undefined || finished(state)
    })
    const ownStates = await Promise.all(unheld.map((row) => stateOf(processEventJobId(row.id))))
    // The row's own job kept finished, or waiting out a delay, is removed and added again now. A
    // delayed one promoted meanwhile is not removed (a running one cannot be): the add under its id
    // is then ignored, and that job runs the row now anyway.
    const replaced = (state: JobState) => state === 'completed' || state === 'failed' || state === 'delayed'
    const readd = unheld.filter((_, index) => {
      const state = ownStates[index] ?? 'unknown'
      return state === 'unknown' || replaced(state)
    })
    await Promise.all(
      unheld.flatMap((row, index) =>
        replaced(ownStates[index] ?? 'unknown') ? [deps.queue.remove(processEventJobId(row.id))] : [],
      ),
    )
    const ids = readd.map((row) => row.id)
    try {
      await addJobs(processEventsJobs(ids), 'requeued')
    } catch (error) {
      // Redis refused them (full, down): known to have no job, so they show as unqueued and the
      // relay's every-tick pass retries them, instead of waiting for another quiet period.
      await markUnqueued(deps.sql, ids).catch(() => {})
      throw error
    }
    return readd.length
  }

  return {
    enqueue(eventRowId) {
      batch.push(eventRowId)
      if (batch.length === 1) setImmediate(flush)
    },
    add,
    requeue,
    async drain() {
      draining = true
      for (const now of [...delayedMarks]) now()
      await Promise.all(inFlight)
    },
  }
}
