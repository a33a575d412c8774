import { isDeepStrictEqual } from 'node:util'
import type { RouteCondition, RouteFilter } from '../config/routes.js'

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

/** RFC 6901 tokens: "~1" is "/", "~0" is "~", unescaped in that order. */
export function parsePointer(pointer: string): string[] {
  if (pointer === '') return []
  return pointer
    .slice(1)
    .split('/')
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'))
}

/** The value at `tokens` in a parsed JSON document; array indexes are decimal without leading zeros. */
export function resolvePointer(
  document: unknown,
  tokens: readonly string[],
): { found: true; value: unknown } | { found: false } {
  let current: unknown = document
  for (const token of tokens) {
    if (Array.isArray(current)) {
      if (!/^(0|[1-9][0-9]*)$/.test(token)) return { found: false }
      const index = Number(token)
      if (index >= current.length) return { found: false }
      current = current[index]
    } else if (typeof current === 'object' && current !== null && Object.hasOwn(current, token)) {
      current = (current as Record<string, unknown>)[token]
    } else {
      return { found: false }
    }
  }
  return { found: true, value: current }
}
