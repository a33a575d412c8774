/** A bounded exponential backoff: the base delay, doubling after every attempt, up to the cap. */
export interface Backoff {
  baseDelayMs: number
  /** `Number.POSITIVE_INFINITY` where something else bounds the wait (attempts, a deadline). */
  maxDelayMs: number
}

/** The wait after `attemptsMade` attempts (1 after the first): base · 2^(n-1), at most the cap. */
export function backoffDelay(backoff: Backoff, attemptsMade: number): number {
  return Math.min(backoff.baseDelayMs * 2 ** Math.max(0, attemptsMade - 1), backoff.maxDelayMs)
}

/**
 * `delayMs` spread at random over its upper half ("equal jitter"): clients that failed together
 * come back apart, and none sooner than half the delay.
 */
export function withJitter(delayMs: number, random: () => number = Math.random): number {
  return delayMs * (0.5 + random() / 2)
}
