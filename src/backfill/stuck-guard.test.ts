import { describe, expect, it } from 'vitest'
import { BackfillError } from './errors.js'
import { stuckGuard } from './stuck-guard.js'

const stuck = (run: () => void) => {
  try {
    run()
  } catch (error) {
    return error instanceof BackfillError ? error.code : 'other'
  }
  return 'passed'
}

describe('stuckGuard', () => {
  it('lets a list through whose pages and cursors are all new', () => {
    const guard = stuckGuard('GitHub', null)
    expect(stuck(() => guard.page(['3', '2'], 'c1'))).toBe('passed')
    expect(stuck(() => guard.page(['1'], 'c2'))).toBe('passed')
    expect(stuck(() => guard.page([], null))).toBe('passed')
  })

  it('stops at a cursor already followed, the resume point included', () => {
    const resumed = stuckGuard('Stripe', 'evt_b')
    expect(stuck(() => resumed.page(['evt_a', 'evt_b'], 'evt_b'))).toBe('stuck_cursor')
    const guard = stuckGuard('GitHub', null)
    guard.page([], 'c1')
    expect(stuck(() => guard.page([], 'c1'))).toBe('stuck_cursor')
  })

  it('stops at a page already read, under a new cursor too', () => {
    const guard = stuckGuard('GitHub', null)
    guard.page(['3', '2'], 'c1')
    expect(stuck(() => guard.page(['3', '2'], 'c2'))).toBe('stuck_cursor')
  })
})
