/**
 * RFC 6901 JSON pointers read against parsed JSON: route filters, ordering keys, event ids and
 * types, dedup keys, evidence rules and the HTTP tool's key placement all address a body this way.
 * Pointers are checked where they are configured (`isJsonPointer`); reading takes one as given.
 */

const POINTER_SYNTAX = /^(\/([^~/]|~[01])*)*$/

/** RFC 6901 syntax: the whole document (""), or "/"-separated tokens with "~0" and "~1" the only escapes. */
export function isJsonPointer(text: string): boolean {
  return POINTER_SYNTAX.test(text)
}

/** The result of reading a pointer: a document may hold `null` there, which is not the same as nothing. */
export type Resolved = { found: true; value: unknown } | { found: false }

/**
 * A pointer's reference tokens: `''` (the whole document) has none. "~1" becomes "/" before "~0"
 * becomes "~", so "~01" stays the token "~1" as the RFC requires.
 */
export function parsePointer(pointer: string): string[] {
  if (pointer === '') return []
  return pointer
    .slice(1)
    .split('/')
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'))
}

/**
 * The value at a pointer in a parsed JSON document; `pointer` is its text, or its tokens when it
 * is read often (parsed once with `parsePointer`). Array indexes are decimal without leading zeros
 * ("-", past the end, finds nothing), and only own properties count: `/constructor` finds nothing
 * in `{}`.
 */
export function resolvePointer(document: unknown, pointer: string | readonly string[]): Resolved {
  const tokens = typeof pointer === 'string' ? parsePointer(pointer) : pointer
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

/** The value at `pointer`, or undefined where there is none (parsed JSON never holds undefined). */
export function valueAt(document: unknown, pointer: string | readonly string[]): unknown {
  const resolved = resolvePointer(document, pointer)
  return resolved.found ? resolved.value : undefined
}
