import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { createBatcher } from '../db/batcher.js'
import type { ClaimLease } from '../db/claims.js'
import { type LeasedEvent, leaseEvents, renewLease } from '../db/events.js'
import { operationBatches } from '../db/operation-batches.js'
import { withDeadline } from '../deadline.js'
import { done, type JobProcessor, type JobResult, type QueuedJob, runAgainAt } from './backend.js'
import { describeError } from './errors.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventData, processEventLaterJob } from './jobs.js'
import { type LostJobTally, lostJobTally, queueErrorLog } from './lost-jobs.js'
import { leaseMarginMs, runLeased } from './run-leased.js'
import { createSlots, type Slots } from './slots.js'
import type { Batches, WorkerDependencies } from './worker-dependencies.js'

/**
 * `handlers` bounds the events whose handler runs at once (`worker.concurrency`); a forward's slot
 * is freed once its call succeeded, before its DONE commits, which took as long again as
 * the call (~7 ms each at concurrency 32, with every slot taken and rows waiting).
 *
 * `leased` bounds the rows leased and not yet finished, in a handler or not: rows are leased while
 * they wait for a handler slot, so a slot that frees starts its next event at once instead of after
 * a lease statement (with the lease inside the slot, each event held its slot ~8 ms of ~23 for the
 * lease alone, and the drain left 20-30 % of the cores idle), and forwards whose slot was freed
 * still hold their place while their DONE commits.
 */
interface Gates {
  handlers: Slots
  leased: Slots
}

/**
 * Rows leased at once per handler slot. Unbounded, a drain at concurrency 96 held ~400 rows
 * (~130 of them committing DONE), the worker's event loop was late by more than its 20 ms ticks and
 * the drain fell to 0.81-0.90 of the baseline; three per slot gave 0.91-1.13 there. At 32, looser
 * bounds measured within the noise of three per slot. A row waits for at most two handlers to
 * finish, and a long wait renews its lease (keepLease).
 */
const LEASED_PER_SLOT = 3

/**
 * The job a row run outside any job is recorded under (inbound_events.job_id, when the lease is the
 * first to record one). No queue holds a job of that id, so the relay's orphan pass finds such a row
 * without a live job once it has been quiet long enough.
 */
const HAND_OFF_JOB_ID = 'hand-off'

/** How long a row run outside any job waits for Redis to take the job of its next try. */
const LATER_JOB_DEADLINE_MS = 2000

/** Waits after an infrastructure error (Postgres down while leasing, say) before a row's next try. */
const INFRASTRUCTURE_RETRY_MS = 1000

/**
 * How often, and how far apart, a row found locked by a statement under way (LeaseResult `locked`)
 * is leased again before it goes to a job of its own a second later. The enqueue mark after a
 * relay's or an api's add locks its rows for the few ms of its UPDATE; a lease that met it used to
 * send each such row to a job of its own a second later, out of its batch: behind a worker running
 * one job at a time, a row then waited for the whole batch (`test/queue/batching.test.ts`).
 */
const LOCKED_RETRIES = 10
const LOCKED_RETRY_MS = 100

/**
 * PENDING → PROCESSING → DONE, or back to PENDING with a backoff, or FAILED once the attempts are
 * used up. The row decides, not the job: a redelivered or stalled job finds the row done, or leased
 * and locked by the worker still running it, and never runs the handler a second time at once.
 */
export interface Worker extends JobProcessor {
  /**
   * Runs a row now in this process, outside any job (an ordering key's hand-off: the next event
   * starts without a round through the queue). A row that must run later, or met an error, gets a
   * job of its own, as a batch job's rows do. `close` waits for these runs too.
   */
  runNow(eventRowId: string): void
  /**
   * runNow for a row this process just claimed PENDING (reserveHere found every place taken), when
   * a place among the leased rows is free now: the row starts without a round through the queue, as
   * a row the queue handed over would. False when every place is taken (or the worker is closing):
   * the row then goes to the queue. A process that dies with such a row leaves it without a job:
   * the relay gives it one (graceMs after the claim for a row not yet leased, orphanAfterMs after
   * the lease ran out for one it was running).
   */
  runHere(eventRowId: string): boolean
  /**
   * runHere decided before the claim: takes a place among the leased rows for a row this process
   * is about to claim, and the lease for the claim to write on it (ClaimLease), so the
   * row is inserted leased instead of inserted and then leased (one write of the row, not two).
   * Undefined when every place is taken or the worker is closing: the row is then claimed PENDING
   * and enqueued. A process that dies before it ran such a row leaves it PROCESSING without a job:
   * the relay's orphan recovery gives it one once its lease has run out (as for runHere's rows).
   */
  reserveHere(): HereLease | undefined
}

/** A place held for a row this process is claiming (Worker.reserveHere). */
export interface HereLease {
  lease: ClaimLease
  /** The claim inserted the row with the lease: run it now. */
  run(row: LeasedEvent): void
  /** The claim inserted no row (a duplicate, a failure): the place goes back. */
  release(): void
}

export function startWorker(deps: WorkerDependencies): Worker {
  const { settings } = deps
  const batches: Batches = {
    lease: createBatcher((requests) => leaseEvents(deps.db.$genericPlans, requests, settings.leaseMs)),
    settle: operationBatches(deps.db.$genericPlans).settle,
  }
  const gates: Gates = {
    handlers: createSlots(settings.concurrency),
    leased: createSlots(settings.concurrency * LEASED_PER_SLOT),
  }
  const lost = lostJobTally(deps.logger)
  const running = new Set<Promise<void>>()
  let closed = false
  const processor = deps.backend.process<ProcessEventData>(
    INBOUND_QUEUE,
    async (job) => processJob(deps, batches, gates, lost, job),
    {
      concurrency: settings.concurrency,
      stalled: {
        intervalMs: settings.stalledIntervalMs,
        lockMs: Math.max(settings.stalledIntervalMs, 5000),
        maxCount: 3,
      },
      ...queueErrorLog(deps.logger, lost),
    },
  )
  /** A place among the leased rows for a row run here, if one is free and the worker is not closing. */
  const takePlace = () => (closed ? undefined : gates.leased.tryAcquire())
  /** Runs a row outside any job, tracked so that close() waits for it. */
  const start = (eventRowId: string, place?: () => void, leased?: Leased) => {
    const run = runRowNow(deps, batches, gates, eventRowId, place, leased).finally(() => running.delete(run))
    running.add(run)
  }
  return {
    runNow(eventRowId) {
      if (!closed) start(eventRowId)
    },
    runHere(eventRowId) {
      const place = takePlace()
      if (place === undefined) return false
      start(eventRowId, place)
      return true
    },
    reserveHere() {
      const place = takePlace()
      if (place === undefined) return undefined
      const reservedAt = Date.now()
      const lease: ClaimLease = {
        token: randomUUID(),
        jobId: HAND_OFF_JOB_ID,
        leaseMs: settings.leaseMs,
      }
      return {
        lease,
        run(row) {
          if (deps.failpoints.isArmed('receive.before_run')) {
            // Crash test: die once the response is surely written, with the leased row not started.
            setTimeout(() => deps.failpoints.hit('receive.before_run'), 200)
            return
          }
          // Closing (close() may no longer wait for a new run): the row is left to the relay's
          // orphan recovery once its lease has run out.
          if (closed) place()
          else start(row.id, place, { row, token: lease.token, leasedAt: reservedAt })
        },
        release: place,
      }
    },
    async close(force) {
      closed = true
      await processor.close(force)
      if (force !== true) await Promise.allSettled([...running])
      lost.stop()
    },
  }
}

/**
 * A row run outside any job; what must run later goes to the queue. `place`: a place among the
 * leased rows already held for it (runHere).
 */
async function runRowNow(
  deps: WorkerDependencies,
  batches: Batches,
  gates: Gates,
  eventRowId: string,
  place?: () => void,
  leased?: Leased,
) {
  const jobId = HAND_OFF_JOB_ID
  let later: number | undefined
  try {
    const result = await processEvent(deps, batches, gates, eventRowId, jobId, place, leased)
    if (result.kind === 'delayed') later = result.until - Date.now()
  } catch (error) {
    deps.logger.warn(
      { err: describeError(error), eventRowId },
      'event failed to run; it gets a job of its own',
    )
    later = INFRASTRUCTURE_RETRY_MS
  }
  if (later === undefined) return
  const job = processEventLaterJob(eventRowId, later)
  // Redis refusing it leaves the row to its own waiting job, if it has one, and to the relay. Bounded:
  // BullMQ waits for a connection that is not there, and close() waits for this run.
  await withDeadline(
    deps.queue.add(job.name, job.data, job.opts),
    LATER_JOB_DEADLINE_MS,
    'Redis did not take the job',
  ).catch((error: unknown) => {
    deps.logger.warn({ err: describeError(error), eventRowId }, 'event not handed to the queue')
  })
}

/**
 * A job's rows, each leased and run on its own (processEvent). A row alone is the job: running it
 * later moves the job. Rows of a batch job that must run later (or that met an infrastructure error)
 * get jobs of their own, so the batch job completes once each row is finished or handed on, and a
 * slow row holds only itself.
 */
async function processJob(
  deps: WorkerDependencies,
  batches: Batches,
  gates: Gates,
  lost: LostJobTally,
  job: QueuedJob<ProcessEventData>,
): Promise<JobResult> {
  const parsed = processEventData.safeParse(job.data)
  if (!parsed.success) {
    // Its hash was evicted or flushed (BullMQ hands over `{}`): the rows it carried are in the ledger
    // and the relay's orphan pass gives them jobs again. Completing it removes the hollow id.
    lost.add(job.id)
    return done
  }
  const { eventRowIds } = parsed.data
  const [only] = eventRowIds
  if (only !== undefined && eventRowIds.length === 1) {
    return processEvent(deps, batches, gates, only, job.id)
  }
  const outcomes = await Promise.allSettled(
    eventRowIds.map((id) => processEvent(deps, batches, gates, id, job.id)),
  )
  const later = outcomes.flatMap((outcome, index) => {
    const id = eventRowIds[index] as string
    if (outcome.status === 'rejected') {
      deps.logger.warn(
        { err: describeError(outcome.reason), eventRowId: id, jobId: job.id },
        'event failed to run; it gets a job of its own',
      )
      return [processEventLaterJob(id, INFRASTRUCTURE_RETRY_MS)]
    }
    const result = outcome.value
    return result.kind === 'delayed' ? [processEventLaterJob(id, result.until - Date.now())] : []
  })
  // Throws when Redis does not take them: the queue runs the whole job again, and its finished rows
  // are only looked at.
  if (later.length > 0) await deps.queue.addBulk(later)
  return done
}

/** A row this worker holds the lease of: its token, and when the lease was taken. */
interface Leased {
  row: LeasedEvent
  token: string
  leasedAt: number
}

/**
 * Leases the row (holding a `leased` place until it is finished), unless its claim leased it
 * (`leased`), waits for a handler slot, and runs it. A row that waited for its slot long enough to
 * matter has its lease renewed first, so its handler starts with a whole lease as if it had just
 * been leased.
 */
async function processEvent(
  deps: WorkerDependencies,
  batches: Batches,
  gates: Gates,
  eventRowId: string,
  jobId: string,
  place?: () => void,
  leasedByClaim?: Leased,
): Promise<JobResult> {
  const releaseLeased = place ?? (await gates.leased.acquire())
  let releaseHandler: (() => void) | undefined
  try {
    let leased = leasedByClaim
    if (leased === undefined) {
      const token = randomUUID()
      let leasedAt = Date.now()
      let lease = await batches.lease.run({ id: eventRowId, token, jobId })
      for (let retry = 0; lease.kind === 'locked' && retry < LOCKED_RETRIES; retry += 1) {
        await sleep(LOCKED_RETRY_MS)
        leasedAt = Date.now()
        lease = await batches.lease.run({ id: eventRowId, token, jobId })
      }
      switch (lease.kind) {
        case 'missing':
          deps.logger.warn({ eventRowId, jobId }, 'job for a row that no longer exists')
          return done
        case 'finished':
          return done
        case 'held':
          // Another worker holds a live lease: look again once it runs out.
          return runAgainAt(lease.until.getTime() + 250)
        case 'locked':
          return runAgainAt(Date.now() + 1000)
        case 'leased':
          leased = { row: lease.row, token, leasedAt }
          break
      }
    }
    releaseHandler = await gates.handlers.acquire()
    const leaseTakenAt = await keepLease(deps, leased)
    if (leaseTakenAt === undefined) {
      deps.logger.warn(
        { eventRowId, jobId },
        'lease taken over while waiting for a handler slot; leaving the row',
      )
      return done
    }
    return await runLeased(deps, batches, leased.row, leased.token, jobId, releaseHandler, leaseTakenAt)
  } finally {
    releaseHandler?.()
    releaseLeased()
  }
}

/**
 * The row's lease, renewed when it waited for its handler slot longer than leaseMarginMs (waits are
 * a few ms while handlers keep finishing; only handlers that all run long make a row wait this
 * long), so its handler starts with a whole lease as if it had just been leased. When the lease it
 * now holds was taken (the time before its statement: the server's is later), or undefined when
 * another worker took the row over meanwhile.
 */
async function keepLease(deps: WorkerDependencies, leased: Leased): Promise<number | undefined> {
  const now = Date.now()
  if (now - leased.leasedAt <= leaseMarginMs(deps.settings)) return leased.leasedAt
  return (await renewLease(deps.sql, leased.row.id, leased.token, deps.settings.leaseMs)) ? now : undefined
}
