import { describe, expect, it } from 'vitest'
import { parsePointer, resolvePointer, valueAt } from './json-pointer.js'

const invoice = {
  data: {
    object: { customer: 'cus_1', 'a/b': 1, 'm~n': 2, '~1': 3, '': 4, note: null, lines: [{ id: 'li_1' }] },
  },
}

describe('JSON pointers (RFC 6901)', () => {
  it('splits a pointer into tokens, unescaping ~1 before ~0', () => {
    expect(parsePointer('')).toEqual([])
    expect(parsePointer('/')).toEqual([''])
    expect(parsePointer('/data/object/a~1b')).toEqual(['data', 'object', 'a/b'])
    expect(parsePointer('/m~0n')).toEqual(['m~n'])
    // "~01" is "~" followed by "1", never "/".
    expect(parsePointer('/~01')).toEqual(['~1'])
  })

  it('resolves escaped keys, from text or from tokens parsed once', () => {
    expect(resolvePointer(invoice, '/data/object/a~1b')).toEqual({ found: true, value: 1 })
    expect(resolvePointer(invoice, '/data/object/m~0n')).toEqual({ found: true, value: 2 })
    expect(resolvePointer(invoice, '/data/object/~01')).toEqual({ found: true, value: 3 })
    expect(resolvePointer(invoice, parsePointer('/data/object/a~1b'))).toEqual({ found: true, value: 1 })
    expect(resolvePointer(invoice, '/data/object/')).toEqual({ found: true, value: 4 })
  })

  it('is the whole document for the empty pointer', () => {
    expect(resolvePointer(invoice, '')).toEqual({ found: true, value: invoice })
    expect(resolvePointer('text', '')).toEqual({ found: true, value: 'text' })
    expect(valueAt(null, '')).toBeNull()
  })

  it('indexes arrays by decimal without leading zeros, within their length', () => {
    expect(resolvePointer(invoice, '/data/object/lines/0/id')).toEqual({ found: true, value: 'li_1' })
    expect(resolvePointer(invoice, '/data/object/lines/01')).toEqual({ found: false })
    expect(resolvePointer(invoice, '/data/object/lines/1')).toEqual({ found: false })
    expect(resolvePointer(invoice, '/data/object/lines/-')).toEqual({ found: false })
    expect(resolvePointer(invoice, '/data/object/lines/length')).toEqual({ found: false })
    expect(resolvePointer(['a', 'b'], '/1')).toEqual({ found: true, value: 'b' })
  })

  it('finds nothing on a missing path, through a scalar, or at an inherited property', () => {
    expect(resolvePointer(invoice, '/data/missing')).toEqual({ found: false })
    expect(resolvePointer(invoice, '/data/object/customer/id')).toEqual({ found: false })
    expect(resolvePointer(null, '/a')).toEqual({ found: false })
    expect(resolvePointer({}, '/constructor')).toEqual({ found: false })
    expect(resolvePointer({}, '/__proto__')).toEqual({ found: false })
  })

  it('tells a null that is there from nothing', () => {
    expect(resolvePointer(invoice, '/data/object/note')).toEqual({ found: true, value: null })
    expect(valueAt(invoice, '/data/object/note')).toBeNull()
    expect(valueAt(invoice, '/data/object/none')).toBeUndefined()
  })
})
