import type postgres from 'postgres'
import { markEnqueued } from '../db/events.js'
import { withDeadline } from '../deadline.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import type { JobQueue } from './backend.js'
import { type ProcessEventData, processEventJob } from './jobs.js'

const ADD_DEADLINE_MS = 2000

/** Adds jobs for committed rows. Used by the HTTP path (after the response) and by the relay. */
export interface Enqueuer {
  /** Fire and forget: batches the rows of concurrent requests into one `addBulk`; never throws. */
  enqueue(eventRowId: string): void
  /** Adds jobs now; throws when Redis does not take them (the relay tries again on its next tick). */
  add(eventRowIds: readonly string[]): Promise<void>
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

  const add = async (ids: readonly string[]) => {
    if (ids.length === 0) return
    // BullMQ waits for a connection that is not there yet; a dead Redis must fail this, not park it.
    await withDeadline(
      deps.queue.addBulk(ids.map((eventRowId) => processEventJob(eventRowId))),
      ADD_DEADLINE_MS,
      `Redis did not take ${ids.length} job(s) within ${ADD_DEADLINE_MS} ms`,
    )
    await markEnqueued(deps.sql, ids)
  }

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

  return {
    enqueue(eventRowId) {
      batch.push(eventRowId)
      if (batch.length === 1) setImmediate(flush)
    },
    add,
    async drain() {
      await Promise.all(inFlight)
    },
  }
}
