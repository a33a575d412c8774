/** Thrown when an awaited step takes longer than its deadline. */
export class DeadlineError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'DeadlineError'
  }
}

/** `promise`, or a DeadlineError after `ms`. The losing promise keeps running; callers must not care. */
export async function withDeadline<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new DeadlineError(message)), ms)
      }),
    ])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Runs `run` with a signal that is aborted when `ms` have passed, and rejects with a DeadlineError
 * then: the one time limit of handlers, tool calls and reconcile calls.
 */
export async function withAbortDeadline<T>(
  ms: number,
  message: string,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController()
  try {
    return await withDeadline(run(controller.signal), ms, message)
  } catch (error) {
    if (error instanceof DeadlineError) controller.abort(error)
    throw error
  }
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
