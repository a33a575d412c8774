import { describe, expect, it } from 'vitest'
import { compileOrderingKey } from './ordering-keys.js'

describe('ordering key hashes', () => {
  const key = compileOrderingKey('/data/object/customer')

  it('are alike for one value however its JSON is spelled', () => {
    const a = key.of({ data: { object: { customer: { id: 'cus_1', region: 'eu' } } } })
    const b = key.of(JSON.parse('{"data":{"object":{"customer":{"region":"eu","id":"cus_1"}}}}'))
    expect(a).toMatch(/^[0-9a-f]{64}$/)
    expect(b).toBe(a)
    expect(key.of({ data: { object: { customer: 1.0 } } })).toBe(
      key.of(JSON.parse('{"data":{"object":{"customer":1}}}')),
    )
  })

  it('differ between values, between pointers, and an event without the key has none', () => {
    const a = key.of({ data: { object: { customer: 'cus_1' } } })
    expect(key.of({ data: { object: { customer: 'cus_2' } } })).not.toBe(a)
    expect(key.of({ data: { object: { customer: ['cus_1'] } } })).not.toBe(a)
    expect(
      compileOrderingKey('/data/object/customer_id').of({ data: { object: { customer_id: 'cus_1' } } }),
    ).not.toBe(a)
    expect(key.of({ data: { object: {} } })).toBeUndefined()
    expect(key.of('not json')).toBeUndefined()
    expect(compileOrderingKey('/lines/0/sku').of({ lines: [{ sku: 'a' }] })).toMatch(/^[0-9a-f]{64}$/)
  })
})
