import { describe, expect, it } from 'vitest'
import { backoffDelay, withJitter } from './backoff.js'

describe('backoff', () => {
  it('doubles from the base after each attempt, up to the cap', () => {
    const backoff = { baseDelayMs: 250, maxDelayMs: 4000 }
    expect([0, 1, 2, 3, 4, 5, 6].map((n) => backoffDelay(backoff, n))).toEqual([
      250, 250, 500, 1000, 2000, 4000, 4000,
    ])
    expect(backoffDelay({ baseDelayMs: 1000, maxDelayMs: Number.POSITIVE_INFINITY }, 11)).toBe(1_024_000)
  })

  it('jitters over the upper half of the delay', () => {
    expect(withJitter(1000, () => 0)).toBe(500)
    expect(withJitter(1000, () => 0.5)).toBe(750)
    expect(withJitter(1000, () => 0.999)).toBeLessThan(1000)
  })
})
