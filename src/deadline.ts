import type { Logger } from './logger.js'

/** Thrown when an awaited step takes longer than its deadline. */
export class DeadlineError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'DeadlineError'
  }
}

/** `promise`, or a DeadlineError after `ms`. The losing promise keeps running; callers must not care. */
export function withDeadline<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  return raceTimer(promise, ms, () => new DeadlineError(message))
}

/**
 * Runs `run` with a signal that is aborted when `ms` have passed, and rejects with a DeadlineError
 * then: the one time limit of handlers, tool calls and reconcile calls.
 */
export function withAbortDeadline<T>(
  ms: number,
  message: string,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController()
  let running: Promise<T>
  try {
    running = run(controller.signal)
  } catch (error) {
    return Promise.reject(error)
  }
  return raceTimer(running, ms, () => {
    const error = new DeadlineError(message)
    controller.abort(error)
    return error
  })
}

/**
 * `promise`, or the error `timedOut` makes once `ms` have passed. One promise and one timer: each
 * event's handler and forward run under two of these, and Promise.race in an async function cost
 * two promises more each time.
 */
function raceTimer<T>(promise: Promise<T>, ms: number, timedOut: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(timedOut()), ms)
    promise.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (error: unknown) => {
        clearTimeout(timer)
        reject(error)
      },
    )
  })
}

/** Waits for `promise` up to `ms`; true when it settled (either way) in time. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return withDeadline(
    promise.then(
      () => true,
      () => true,
    ),
    ms,
    '',
  ).catch(() => false)
}

/** When a loop is not told: a pass of a few quick statements that runs this long is stuck. */
export const DEFAULT_STUCK_AFTER_MS = 60_000

/**
 * Waits for one pass of a background loop, warning every `stuckAfterMs` while it has not ended
 * (naming the loop and how long it has run), and saying when a pass it warned about ends. A pass
 * is bounded by its statements' deadlines; this says so in the log when something else holds it.
 */
export async function watchPass<T>(
  pass: Promise<T>,
  options: { logger: Logger; loop: string; stuckAfterMs: number },
): Promise<T> {
  const startedAt = Date.now()
  let warned = false
  const timer = setInterval(() => {
    warned = true
    const runningMs = Date.now() - startedAt
    options.logger.warn(
      { loop: options.loop, runningMs },
      `${options.loop} pass stuck: running for ${Math.round(runningMs / 1000)} s`,
    )
  }, options.stuckAfterMs)
  try {
    return await pass
  } finally {
    clearInterval(timer)
    if (warned) {
      options.logger.warn(
        { loop: options.loop, tookMs: Date.now() - startedAt },
        `${options.loop} pass ended after ${Math.round((Date.now() - startedAt) / 1000)} s`,
      )
    }
  }
}
