import { type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { backoffDelay } from '../backoff.js'
import type { ConfigFile } from '../config/config.js'
import { type LeasedEvent, lockLeasedEvent, markAttemptFailed, markDone, releaseLease } from '../db/events.js'
import { LeaseLostError } from '../db/lease.js'
import { withAbortDeadline } from '../deadline.js'
import type { Logger } from '../logger.js'
import { contextUnder, scopeOf, TRACING_OFF, type TraceScope, traceIdOf } from '../tracing.js'
import { done, type JobResult, runAgainAt } from './backend.js'
import { describeError } from './errors.js'
import { type EventContext, HandlerError, type HandlerResult, RetryLaterError } from './handler.js'
import type { Batches, WorkerDependencies } from './worker-dependencies.js'

// A leased row's run, once the worker (worker.ts) has its lease and a handler slot: the handler under
// its deadline, then DONE, or the failure recorded with a backoff.

/** The worker's span of one attempt at an event. */
export const PROCESS_SPAN = 'process event'
const PROCESS_SPAN_OPTIONS = { kind: SpanKind.CONSUMER }

/**
 * Runs the handler of a row this worker leased, and records how it ended, in a span that continues
 * the receive's trace (its traceparent is on the row): the trace id the admin page shows for the
 * event then finds the receive, every attempt, and what each attempt sent.
 */
export async function runLeased(
  deps: WorkerDependencies,
  batches: Batches,
  row: LeasedEvent,
  leaseToken: string,
  jobId: string,
  /** Frees the event's handler slot: a forward's is freed as soon as its call succeeded. */
  releaseHandler: () => void,
  /** When the lease the worker holds was taken (Date.now()): the handler's deadline ends before it. */
  leaseTakenAt: number,
): Promise<JobResult> {
  const tracing = deps.tracing ?? TRACING_OFF
  const span = tracing.tracer.startSpan(
    PROCESS_SPAN,
    PROCESS_SPAN_OPTIONS,
    tracing.enabled ? contextUnder(row.traceParent) : undefined,
  )
  if (span.isRecording()) {
    span.setAttributes({
      'hookledger.source': row.source,
      'hookledger.event_row_id': row.id,
      'hookledger.attempt': row.attempts,
    })
  }
  try {
    return await runAttempt(
      deps,
      batches,
      row,
      leaseToken,
      jobId,
      releaseHandler,
      leaseTakenAt,
      span,
      tracing.tracer,
    )
  } finally {
    span.end()
  }
}

async function runAttempt(
  deps: WorkerDependencies,
  batches: Batches,
  row: LeasedEvent,
  leaseToken: string,
  jobId: string,
  releaseHandler: () => void,
  leaseTakenAt: number,
  span: Span,
  tracer: TraceScope['tracer'],
): Promise<JobResult> {
  const eventRowId = row.id
  // Made when first used: most events finish without a line to log.
  let eventLogger: Logger | undefined
  const log = () => {
    if (eventLogger === undefined) {
      const traceId = traceIdOf(row.traceParent)
      eventLogger = deps.logger.child({ eventRowId, jobId, ...(traceId === undefined ? {} : { traceId }) })
    }
    return eventLogger
  }
  const startedAt = new Date()
  const handler = deps.handlers.get(row.source)
  const trace = scopeOf(tracer, span)
  try {
    await handler?.before?.(row, trace)
    if (handler === undefined) throw new HandlerError(`no handler is configured for source '${row.source}'`)
    if (handler.kind === 'direct') {
      const result = await withHandlerDeadline(deps, leaseTakenAt, (signal) =>
        handler.run(handlerContext(row, signal, log, trace), releaseHandler),
      )
      deps.failpoints.hit('worker.before_done')
      const settled = await batches.settle.run({
        done: {
          id: row.id,
          token: leaseToken,
          attempt: row.attempts,
          startedAt,
          finishedAt: new Date(),
          ...(result ?? {}),
        },
      })
      if (!settled.done) throw new LeaseLostError(`event row ${row.id}`)
    } else {
      await deps.db.transaction(async (tx) => {
        if (!(await lockLeasedEvent(tx, row.id, leaseToken))) throw new LeaseLostError(`event row ${row.id}`)
        const result = await withHandlerDeadline(deps, leaseTakenAt, (signal) =>
          handler.run({ ...handlerContext(row, signal, log, trace), tx }),
        )
        deps.failpoints.hit('worker.before_done')
        await markDone(tx, row.id, { attempt: row.attempts, startedAt, ...(result ?? {}) })
      })
    }
    deps.failpoints.hit('worker.after_done')
    span.setAttribute('hookledger.result', 'done')
    deps.metrics.attempts.inc({ source: row.source, result: 'done' })
    deps.metrics.processingSeconds.observe(
      { source: row.source, status: 'done' },
      (Date.now() - row.receivedAt.getTime()) / 1000,
    )
  } catch (error) {
    if (error instanceof LeaseLostError) {
      span.setAttribute('hookledger.result', 'lease_lost')
      log().warn('lease taken over by another worker; leaving the row to it')
      return done
    }
    if (error instanceof RetryLaterError) {
      // Waiting (a destination's limit or open circuit, a disabled route, a route's operation leased
      // by another worker) is not this event's failure: no attempt is used up.
      span.setAttribute('hookledger.result', 'retry_later')
      const retryAt = Date.now() + Math.max(error.retryAfterMs, 250)
      await releaseLease(
        deps.sql,
        row.id,
        leaseToken,
        new Date(retryAt),
        error.sent === undefined
          ? undefined
          : { attempt: row.attempts, startedAt, error: error.message, ...error.sent },
      )
      if (error.quiet) log().debug({ retryAfterMs: error.retryAfterMs }, error.message)
      else log().info({ retryAfterMs: error.retryAfterMs }, error.message)
      return runAgainAt(retryAt)
    }
    const result = await recordFailure(deps, row, leaseToken, startedAt, error, log())
    if (span.isRecording()) {
      span.setAttribute('hookledger.result', result.kind === 'done' ? 'failed' : 'retry')
      span.setStatus({ code: SpanStatusCode.ERROR, message: describeError(error).message.slice(0, 500) })
    }
    return result
  }
  // After the commit: an ordering key hands its line to the next event, which must see this DONE.
  await handler?.done?.(row.id)
  return done
}

/** What the handler sees of its event. The body is parsed and the logger made only when read (a forward needs neither). */
function handlerContext(
  row: LeasedEvent,
  signal: AbortSignal,
  logger: () => Logger,
  trace: TraceScope | undefined,
): EventContext {
  let event: { parsed: unknown } | undefined
  return {
    eventRowId: row.id,
    source: row.source,
    eventId: row.eventId,
    eventType: row.eventType,
    get event() {
      event ??= { parsed: parseStoredBody(row.body) }
      return event.parsed
    },
    raw: row.body,
    headers: row.headers,
    attempt: row.attempts,
    signal,
    get logger() {
      return logger()
    },
    trace,
  }
}

/** Back to PENDING with a backoff, or FAILED once the attempts are used up. */
async function recordFailure(
  deps: WorkerDependencies,
  row: LeasedEvent,
  leaseToken: string,
  startedAt: Date,
  error: unknown,
  log: Logger,
): Promise<JobResult> {
  const final = row.attempts >= deps.settings.maxAttempts
  const delayMs = backoffDelay(
    { baseDelayMs: deps.settings.backoffBaseMs, maxDelayMs: deps.settings.backoffMaxMs },
    row.attempts,
  )
  const details: HandlerResult = error instanceof HandlerError ? error.details : {}
  const cause = describeError(error)
  const status = await markAttemptFailed(deps.sql, row.id, leaseToken, {
    attempt: row.attempts,
    startedAt,
    error: cause.message.slice(0, 2000),
    final,
    retryAt: new Date(Date.now() + delayMs),
    ...details,
  })
  log.warn(
    { attempt: row.attempts, final, err: error instanceof HandlerError ? undefined : cause },
    cause.message,
  )
  deps.metrics.attempts.inc({ source: row.source, result: 'error' })
  if (status === 'failed') {
    deps.metrics.processingSeconds.observe(
      { source: row.source, status: 'failed' },
      (Date.now() - row.receivedAt.getTime()) / 1000,
    )
  }
  return status === 'pending' ? runAgainAt(Date.now() + delayMs) : done
}

/** Runs the handler with a signal that is aborted when its time is up (handlerDeadlineMs). */
function withHandlerDeadline<T>(
  deps: WorkerDependencies,
  leaseTakenAt: number,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const { handlerTimeoutMs } = deps.settings
  const ms = handlerDeadlineMs(deps.settings, leaseTakenAt, Date.now())
  const message =
    ms < handlerTimeoutMs
      ? `handler did not finish within ${ms} ms, what its lease had left (handlerTimeoutMs ${handlerTimeoutMs})`
      : `handler did not finish within ${ms} ms`
  return withAbortDeadline(ms, message, run)
}

/**
 * What separates a handler's deadline from the end of its lease: a second, or half of what the lease
 * has beyond `handlerTimeoutMs` when that is less. A row that waited longer than this for its
 * handler slot has its lease renewed first (worker.ts).
 */
export function leaseMarginMs(settings: Pick<ConfigFile['worker'], 'leaseMs' | 'handlerTimeoutMs'>): number {
  return Math.min(1000, (settings.leaseMs - settings.handlerTimeoutMs) / 2)
}

/**
 * A handler's time: `handlerTimeoutMs`, and never past its lease less leaseMarginMs. A handler that
 * starts late in its lease (after an evidence step, which runs outside this deadline) is stopped
 * before another worker may take the row over: a forward, which has no lease of its own beside its
 * event's, is then never sent by two workers at once.
 */
export function handlerDeadlineMs(
  settings: Pick<ConfigFile['worker'], 'leaseMs' | 'handlerTimeoutMs'>,
  leaseTakenAt: number,
  now: number,
): number {
  const leaseLeft = leaseTakenAt + settings.leaseMs - leaseMarginMs(settings) - now
  return Math.max(0, Math.min(settings.handlerTimeoutMs, leaseLeft))
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
