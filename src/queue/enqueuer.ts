import type postgres from 'postgres'
import { type EnqueuedRow, markEnqueued } from '../db/events.js'
import { withDeadline } from '../deadline.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import type { JobQueue, JobState, JobToAdd } from './backend.js'
import { type ProcessEventData, processEventJob, processEventJobId, processEventsJobs } from './jobs.js'

const ADD_DEADLINE_MS = 2000

/** A row to requeue, with the job it was first enqueued in when known (inbound_events.job_id). */
export interface RequeuedRow {
  id: string
  jobId?: string | null | undefined
}

/** Adds jobs for committed rows. Used by the HTTP path (after the response) and by the relay. */
export interface Enqueuer {
  /** Fire and forget: batches the rows of concurrent requests into one `addBulk`; never throws. */
  enqueue(eventRowId: string): void
  /**
   * Adds jobs now, the rows together (see `processEventsJobs`); throws when Redis does not take them
   * (the relay tries again on its next tick).
   */
  add(eventRowIds: readonly string[]): Promise<void>
  /**
   * Adds jobs again for rows that must run again (a lost job): a finished job with the row's id is
   * kept for a while and BullMQ silently ignores an add with that id, so it is removed first. A row
   * with a live job (waiting, delayed, active), its own or the batch job it was first enqueued in
   * (`jobId`), keeps that job, which will find the row PENDING. Returns how many rows got a new job;
   * throws like `add`.
   */
  requeue(rows: readonly RequeuedRow[]): Promise<number>
  /** Waits for adds already under way (shutdown). */
  drain(): Promise<void>
}

export function createEnqueuer(deps: {
  queue: JobQueue<ProcessEventData>
  sql: postgres.Sql
  logger: Logger
  failpoints: Failpoints
}): Enqueuer {
  let batch: string[] = []
  const inFlight = new Set<Promise<void>>()

  const addJobs = async (jobs: readonly JobToAdd<ProcessEventData>[]) => {
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
    await markEnqueued(deps.sql, rows)
  }
  const add = (ids: readonly string[]) => addJobs(processEventsJobs(ids))
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
    const done = add(ids)
      .catch((error: unknown) => {
        deps.logger.warn(
          { err: error, count: ids.length },
          'enqueue failed; the relay will enqueue these rows',
        )
      })
      .finally(() => inFlight.delete(done))
    inFlight.add(done)
  }

  const requeue = async (rows: readonly RequeuedRow[]) => {
    // The rows of one batch job share it: asked about once per call.
    const batchStates = new Map<string, Promise<JobState>>()
    const batchState = (jobId: string) => {
      let state = batchStates.get(jobId)
      if (state === undefined) {
        state = stateOf(jobId)
        batchStates.set(jobId, state)
      }
      return state
    }
    // The rows are asked about together, not one after another: a bulk replay requeues a thousand
    // rows per call, and a round trip each in turn made that seconds instead of milliseconds.
    const readd = await Promise.all(
      rows.map(async (row): Promise<string | undefined> => {
        const ownJobId = processEventJobId(row.id)
        if (row.jobId != null && row.jobId !== ownJobId && !finished(await batchState(row.jobId))) {
          return undefined
        }
        const state = await stateOf(ownJobId)
        if (!finished(state)) return undefined
        if (state !== 'unknown') await deps.queue.remove(ownJobId)
        return row.id
      }),
    )
    const ids = readd.filter((id): id is string => id !== undefined)
    // Each row gets its own job back, so the next requeue finds it under the row's job id.
    await addJobs(ids.map((id) => processEventJob(id)))
    return ids.length
  }

  return {
    enqueue(eventRowId) {
      batch.push(eventRowId)
      if (batch.length === 1) setImmediate(flush)
    },
    add,
    requeue,
    async drain() {
      await Promise.all(inFlight)
    },
  }
}
