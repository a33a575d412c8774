import { describe, expect, it } from 'vitest'
import { handlerDeadlineMs, leaseMarginMs } from './run-leased.js'

// A source's forward has no lease beside its event's: a handler still running when the event's
// lease ends could be sent a second time by the worker that takes the row over. Its deadline ends
// before the lease does.

describe("a handler's deadline", () => {
  const defaults = { leaseMs: 60_000, handlerTimeoutMs: 30_000 }
  const thin = { leaseMs: 3_000, handlerTimeoutMs: 2_800 }

  it('is handlerTimeoutMs for a handler that starts early in its lease', () => {
    expect(handlerDeadlineMs(defaults, 1_000_000, 1_000_000)).toBe(30_000)
    expect(handlerDeadlineMs(defaults, 1_000_000, 1_000_000 + 25_000)).toBe(30_000)
    expect(handlerDeadlineMs(thin, 1_000_000, 1_000_000 + 50)).toBe(2_800)
  })

  it('ends a margin before the lease for a handler that starts late in it', () => {
    expect(leaseMarginMs(defaults)).toBe(1_000)
    expect(handlerDeadlineMs(defaults, 1_000_000, 1_000_000 + 40_000)).toBe(19_000)
    // Half of what the lease has beyond the handler's time when that is less than a second.
    expect(leaseMarginMs(thin)).toBe(100)
    expect(handlerDeadlineMs(thin, 1_000_000, 1_000_000 + 500)).toBe(2_400)
  })

  it('is 0 once the lease is as good as over: the handler is stopped before it sends', () => {
    expect(handlerDeadlineMs(thin, 1_000_000, 1_000_000 + 2_950)).toBe(0)
    expect(handlerDeadlineMs(defaults, 1_000_000, 1_000_000 + 70_000)).toBe(0)
  })
})
