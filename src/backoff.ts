/** A bounded exponential backoff: the base delay, doubling after every attempt, up to the cap. */
export interface Backoff {
  baseDelayMs: number
  maxDelayMs: number
}

/** The wait after `attemptsMade` attempts (1 after the first): base · 2^(n-1), at most the cap. */
export function backoffDelay(backoff: Backoff, attemptsMade: number): number {
  return Math.min(backoff.baseDelayMs * 2 ** Math.max(0, attemptsMade - 1), backoff.maxDelayMs)
}
