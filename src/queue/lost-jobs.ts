import type { Logger } from '../logger.js'
import type { ProcessOptions } from './backend.js'
import { describeError } from './errors.js'
import { isOutOfMemory } from './redis-health.js'

/**
 * BullMQ's answer when it finishes a job whose hash is gone: Redis evicted or flushed it while the
 * job's id was still queued or running.
 */
const MISSING_KEY = /^Missing key for job (\S+)\. /

/** The job id an error names when it is about a job whose data Redis lost; undefined otherwise. */
export function lostJobOf(error: unknown): string | undefined {
  return error instanceof Error ? MISSING_KEY.exec(error.message)?.[1] : undefined
}

export interface LostJobTally {
  /** A job whose data was missing or unreadable: dropped, counted, not logged on its own. */
  add(jobId: string): void
  /** Logs what is left and stops the interval. */
  stop(): void
}

/** One summary line per interval, however many jobs an evicting Redis hollowed out meanwhile. */
const SUMMARY_EVERY_MS = 10_000

/**
 * An evicting Redis deletes job hashes while their ids stay queued: the worker then gets jobs with
 * no data, and BullMQ cannot finish them ("Missing key for job …"). Nothing is lost (the rows are in
 * the ledger and the relay re-enqueues them), so hundreds of "job failed" lines would only bury the
 * one that matters (redis-health.ts logs the policy). A job counts once, also when both happen to it.
 */
export function lostJobTally(logger: Logger): LostJobTally {
  let current = new Set<string>()
  let previous = new Set<string>()
  const flush = () => {
    if (current.size > 0) {
      logger.warn(
        { jobs: current.size },
        'dropped jobs whose data Redis lost; the relay re-enqueues their rows',
      )
    }
    previous = current
    current = new Set()
  }
  const timer = setInterval(flush, SUMMARY_EVERY_MS)
  timer.unref()
  return {
    add(jobId) {
      if (!previous.has(jobId)) current.add(jobId)
    },
    stop() {
      clearInterval(timer)
      flush()
    },
  }
}

/**
 * The worker's `onError` and `onFailed`: a job whose data Redis lost goes to the tally; a failed run
 * is a line each; connection errors (ioredis reports every reconnect attempt of an outage) one line
 * per half minute.
 */
export function queueErrorLog(
  logger: Logger,
  lost: LostJobTally,
): Required<Pick<ProcessOptions, 'onError' | 'onFailed'>> {
  let lastErrorLog = 0
  return {
    onError(error) {
      const lostJob = lostJobOf(error)
      if (lostJob !== undefined) return lost.add(lostJob)
      if (Date.now() - lastErrorLog < 30_000) return
      lastErrorLog = Date.now()
      if (isOutOfMemory(error))
        logger.warn({ err: error }, "Redis refuses the worker's writes (OOM); see /readyz")
      else logger.warn({ err: error }, 'worker cannot reach Redis; retrying')
    },
    onFailed(jobId, error) {
      const lostJob = lostJobOf(error)
      if (lostJob !== undefined) return lost.add(lostJob)
      logger.warn({ err: describeError(error), jobId }, 'job failed; the relay re-enqueues its row if needed')
    },
  }
}
