import { describe, expect, it } from 'vitest'
import { routeSchema } from '../config/routes.js'
import { compileFilter } from './filter.js'

const invoice = {
  type: 'invoice.paid',
  data: {
    object: { livemode: true, customer: 'cus_1', amount: 500, 'a/b': 1, 'm~n': 2, lines: [{ id: 'li_1' }] },
  },
}

describe('route filters', () => {
  it('matches event types by glob, any one of them', () => {
    const filter = compileFilter({ types: ['invoice.*', 'customer.created'] })
    expect(filter({ eventType: 'invoice.paid', event: {} })).toBe(true)
    expect(filter({ eventType: 'invoice.payment.failed', event: {} })).toBe(true)
    expect(filter({ eventType: 'customer.created', event: {} })).toBe(true)
    expect(filter({ eventType: 'customer.updated', event: {} })).toBe(false)
    // A dot in a glob is a dot, not "any character".
    expect(filter({ eventType: 'invoiceXpaid', event: {} })).toBe(false)
    expect(filter({ eventType: null, event: {} })).toBe(false)
  })

  it('requires every where condition: equals, in and exists', () => {
    const filter = compileFilter({
      where: [
        { path: '/data/object/livemode', equals: true },
        { path: '/data/object/customer', in: ['cus_1', 'cus_2'] },
        { path: '/data/object/deleted', exists: false },
      ],
    })
    expect(filter({ eventType: 'invoice.paid', event: invoice })).toBe(true)
    const test = { ...invoice, data: { object: { ...invoice.data.object, livemode: false } } }
    expect(filter({ eventType: 'invoice.paid', event: test })).toBe(false)
    const other = { ...invoice, data: { object: { ...invoice.data.object, customer: 'cus_9' } } }
    expect(filter({ eventType: 'invoice.paid', event: other })).toBe(false)
    const deleted = { ...invoice, data: { object: { ...invoice.data.object, deleted: null } } }
    expect(filter({ eventType: 'invoice.paid', event: deleted })).toBe(false)
  })

  it('compares objects by value and never matches a missing path', () => {
    const filter = compileFilter({ where: [{ path: '/data/object/lines/0', equals: { id: 'li_1' } }] })
    expect(filter({ eventType: null, event: invoice })).toBe(true)
    expect(
      compileFilter({ where: [{ path: '/nope', equals: null }] })({ eventType: null, event: invoice }),
    ).toBe(false)
    // A body that is not JSON is a string: no path inside it exists.
    expect(compileFilter({ where: [{ path: '/a', exists: true }] })({ eventType: null, event: 'a=1' })).toBe(
      false,
    )
  })

  it('no filter matches every event', () => {
    expect(compileFilter(undefined)({ eventType: null, event: 'x' })).toBe(true)
  })
})

describe('route config', () => {
  it('refuses a condition with no test or two, a bad pointer, and a route with two destinations', () => {
    const bad = (route: unknown) => routeSchema.safeParse(route).error?.issues.map((i) => i.message)
    expect(bad({ id: 'a', handler: 'x', filter: { where: [{ path: '/a' }] } })).toEqual([
      'needs exactly one of "equals", "in" or "exists" (has none)',
    ])
    expect(
      bad({ id: 'a', handler: 'x', filter: { where: [{ path: '/a', equals: 1, exists: true }] } }),
    ).toEqual(['needs exactly one of "equals", "in" or "exists" (has equals, exists)'])
    expect(bad({ id: 'a', handler: 'x', filter: { where: [{ path: 'a', exists: true }] } })?.[0]).toMatch(
      /JSON pointer/,
    )
    expect(bad({ id: 'a', handler: 'x', forward: { url: 'http://127.0.0.1/' } })).toEqual([
      'needs exactly one of "forward" or "handler"',
    ])
    expect(bad({ id: 'a', handler: 'x', filter: { where: [{ path: '/a', equals: null }] } })).toBeUndefined()
  })
})
