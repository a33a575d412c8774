import { describe, expect, it } from 'vitest'
import { retryAfterMs } from './http-send.js'

describe('Retry-After', () => {
  const now = Date.parse('2026-12-03T14:00:00Z')
  it('reads seconds or an HTTP date from a 429 or 503, capped at a day', () => {
    expect(retryAfterMs({ status: 429, headers: { 'retry-after': '2' } }, now)).toBe(2000)
    expect(
      retryAfterMs({ status: 503, headers: { 'retry-after': 'Thu, 03 Dec 2026 14:00:30 GMT' } }, now),
    ).toBe(30_000)
    expect(retryAfterMs({ status: 503, headers: { 'retry-after': '9999999' } }, now)).toBe(
      24 * 60 * 60 * 1000,
    )
    // A date already past asks for no wait; garbage and other statuses ask for none at all.
    expect(
      retryAfterMs({ status: 429, headers: { 'retry-after': 'Thu, 03 Dec 2026 13:00:00 GMT' } }, now),
    ).toBe(0)
    expect(retryAfterMs({ status: 429, headers: { 'retry-after': 'soon' } }, now)).toBeUndefined()
    expect(retryAfterMs({ status: 500, headers: { 'retry-after': '2' } }, now)).toBeUndefined()
    expect(retryAfterMs({ status: 429, headers: {} }, now)).toBeUndefined()
  })
})
