import { randomUUID } from 'node:crypto'
import type postgres from 'postgres'
import { backoffDelay } from '../backoff.js'
import type { ConfigFile } from '../config/config.js'
import type { Database } from '../db/client.js'
import { leaseEvent, lockLeasedEvent, markAttemptFailed, markDone } from '../db/events.js'
import { LeaseLostError } from '../db/lease.js'
import { withAbortDeadline } from '../deadline.js'
import type { Failpoints } from '../failpoints.js'
import { type EventHandler, type EventInvoker, HandlerError, type HandlerResult } from '../handlers/types.js'
import type { Logger } from '../logger.js'
import type { Metrics } from '../metrics.js'
import {
  done,
  type JobProcessor,
  type JobResult,
  type QueueBackend,
  type QueuedJob,
  runAgainAt,
} from './backend.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventData } from './jobs.js'

export interface WorkerDependencies {
  backend: QueueBackend
  db: Database
  sql: postgres.Sql
  handlers: ReadonlyMap<string, EventHandler>
  settings: ConfigFile['worker']
  logger: Logger
  metrics: Metrics
  failpoints: Failpoints
  /** Backs `ctx.invoke`; without it a handler's invoke throws. */
  invoke?: EventInvoker
}

/**
 * PENDING → PROCESSING → DONE, or back to PENDING with a backoff, or FAILED once the attempts are
 * used up. The row decides, not the job: a redelivered or stalled job finds the row done, or leased
 * and locked by the worker still running it, and never runs the handler a second time at once.
 */
export function startWorker(deps: WorkerDependencies): JobProcessor {
  const { settings } = deps
  // ioredis reports every reconnect attempt during an outage; one line per half minute is enough.
  let lastErrorLog = 0
  return deps.backend.process<ProcessEventData>(INBOUND_QUEUE, async (job) => processEvent(deps, job), {
    concurrency: settings.concurrency,
    stalled: {
      intervalMs: settings.stalledIntervalMs,
      lockMs: Math.max(settings.stalledIntervalMs, 5000),
      maxCount: 3,
    },
    onError: (error) => {
      if (Date.now() - lastErrorLog < 30_000) return
      lastErrorLog = Date.now()
      deps.logger.warn({ err: error }, 'worker cannot reach Redis; retrying')
    },
    onFailed: (jobId, error) =>
      deps.logger.warn({ err: error, jobId }, 'job failed; the relay re-enqueues its row if needed'),
  })
}

async function processEvent(deps: WorkerDependencies, job: QueuedJob<ProcessEventData>): Promise<JobResult> {
  const { eventRowId } = processEventData.parse(job.data)
  const leaseToken = randomUUID()
  const lease = await leaseEvent(deps.sql, eventRowId, leaseToken, deps.settings.leaseMs)
  const log = deps.logger.child({ eventRowId, jobId: job.id })
  switch (lease.kind) {
    case 'missing':
      log.warn('job for a row that no longer exists')
      return done
    case 'finished':
      return done
    case 'held':
      // Another worker holds a live lease: look again once it runs out.
      return runAgainAt(lease.until.getTime() + 250)
    case 'leased':
      break
  }

  const row = lease.row
  const startedAt = new Date()
  const handler = deps.handlers.get(row.source)
  try {
    if (handler === undefined) throw new HandlerError(`no handler is configured for source '${row.source}'`)
    await deps.db.transaction(async (tx) => {
      if (!(await lockLeasedEvent(tx, row.id, leaseToken))) throw new LeaseLostError(`event row ${row.id}`)
      const timeoutMs = deps.settings.handlerTimeoutMs
      const result = await withAbortDeadline(
        timeoutMs,
        `handler did not finish within ${timeoutMs} ms`,
        (signal) =>
          handler({
            source: row.source,
            eventId: row.eventId,
            eventType: row.eventType,
            event: parseStoredBody(row.body),
            raw: row.body,
            headers: row.headers,
            attempt: row.attempts,
            tx,
            signal,
            logger: log,
            invoke: (tool, step, args) => {
              if (deps.invoke === undefined) throw new Error('this worker has no outbound ledger')
              return deps.invoke({
                source: row.source,
                eventId: row.eventId,
                runId: `${row.id}/${row.attempts}`,
              })(tool, step, args)
            },
          }),
      )
      deps.failpoints.hit('worker.before_done')
      await markDone(tx, row.id, { attempt: row.attempts, startedAt, ...(result ?? {}) })
    })
    deps.failpoints.hit('worker.after_done')
    deps.metrics.attempts.inc({ source: row.source, result: 'done' })
    deps.metrics.processingSeconds.observe(
      { source: row.source, status: 'done' },
      (Date.now() - row.receivedAt.getTime()) / 1000,
    )
  } catch (error) {
    if (error instanceof LeaseLostError) {
      log.warn('lease taken over by another worker; leaving the row to it')
      return done
    }
    const final = row.attempts >= deps.settings.maxAttempts
    const delayMs = backoffDelay(
      { baseDelayMs: deps.settings.backoffBaseMs, maxDelayMs: deps.settings.backoffMaxMs },
      row.attempts,
    )
    const details: HandlerResult = error instanceof HandlerError ? error.details : {}
    const message = error instanceof Error ? error.message : String(error)
    const status = await markAttemptFailed(deps.sql, row.id, leaseToken, {
      attempt: row.attempts,
      startedAt,
      error: message.slice(0, 2000),
      final,
      retryAt: new Date(Date.now() + delayMs),
      ...details,
    })
    log.warn(
      { attempt: row.attempts, final, err: error instanceof HandlerError ? undefined : error },
      message,
    )
    deps.metrics.attempts.inc({ source: row.source, result: 'error' })
    if (status === 'failed') {
      deps.metrics.processingSeconds.observe(
        { source: row.source, status: 'failed' },
        (Date.now() - row.receivedAt.getTime()) / 1000,
      )
    }
    if (status === 'pending') return runAgainAt(Date.now() + delayMs)
  }
  return done
}

/** The body as the handler sees it: parsed JSON, or the text itself for bodies that are not JSON. */
function parseStoredBody(body: Buffer): unknown {
  const text = body.toString('utf8')
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
