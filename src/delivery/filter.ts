import { isDeepStrictEqual } from 'node:util'
import type { RouteCondition, RouteFilter } from '../config/routes.js'
import { parsePointer, resolvePointer } from '../json-pointer.js'

/** What a filter reads of an event: its type as the verifier extracted it, and its parsed body. */
export interface FilterInput {
  eventType: string | null
  event: unknown
}

export type EventFilter = (input: FilterInput) => boolean

/**
 * Compiles a route's filter once at start-up. Types are globs where `*` stands for any run of
 * characters, dots included (`invoice.*` matches `invoice.payment.failed`); any one must match, and an
 * event without a type matches none. Every `where` condition must hold. No filter matches everything.
 */
export function compileFilter(filter: RouteFilter | undefined): EventFilter {
  if (filter === undefined) return () => true
  const types = filter.types?.map(globToRegExp)
  const conditions = filter.where?.map(compileCondition) ?? []
  return ({ eventType, event }) => {
    if (types !== undefined && (eventType === null || !types.some((type) => type.test(eventType))))
      return false
    return conditions.every((holds) => holds(event))
  }
}

function globToRegExp(glob: string): RegExp {
  const escaped = glob.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
  return new RegExp(`^${escaped.join('.*')}$`)
}

function compileCondition(condition: RouteCondition): (event: unknown) => boolean {
  const tokens = parsePointer(condition.path)
  if (condition.exists !== undefined) {
    const wanted = condition.exists
    return (event) => resolvePointer(event, tokens).found === wanted
  }
  if (condition.in !== undefined) {
    const allowed = condition.in
    return (event) => {
      const resolved = resolvePointer(event, tokens)
      return resolved.found && allowed.some((value) => isDeepStrictEqual(value, resolved.value))
    }
  }
  const expected = condition.equals
  return (event) => {
    const resolved = resolvePointer(event, tokens)
    return resolved.found && isDeepStrictEqual(expected, resolved.value)
  }
}
