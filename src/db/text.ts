/**
 * Text PostgreSQL cannot store: NUL (refused in `text`, 22021, and as `\u0000` in `jsonb`) and lone
 * UTF-16 surrogates (refused by `jsonb`, silently changed to U+FFFD in `text`). Valid JSON and valid
 * HTTP can both carry them, so every string bound for the ledger is checked or made storable first:
 * one such value must never fail the statement that carries other requests' rows (DESIGN.md, 10).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is exactly what is looked for
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g

/** `text` with each unstorable character replaced by U+FFFD, for derived fields (types, headers). */
export function storableText(text: string): string {
  return text.replace(UNSTORABLE, '\ufffd')
}

/** Why `text` cannot be stored as it is, or undefined when it can. */
export function unstorableText(text: string): string | undefined {
  if (text.includes('\u0000')) return 'contains a NUL character (\\u0000), which PostgreSQL cannot store'
  UNSTORABLE.lastIndex = 0
  return UNSTORABLE.test(text) ? 'contains a lone UTF-16 surrogate, which is not Unicode text' : undefined
}

export type JsonProblem =
  | { kind: 'too_deep'; path: string }
  | { kind: 'unstorable'; path: string; reason: string }

/**
 * The first place in a parsed JSON value that the ledger cannot take: nesting deeper than `maxDepth`
 * (hashing, validation and jsonb all recurse, and a deep enough value overflows the stack), or a key
 * or string that `unstorableText` refuses. Walks with its own stack, so the check cannot overflow.
 */
export function findJsonProblem(value: unknown, maxDepth: number): JsonProblem | undefined {
  const pending: Array<{ value: unknown; path: string; depth: number }> = [{ value, path: '', depth: 0 }]
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value: current, path, depth } = next
    if (typeof current === 'string') {
      const reason = unstorableText(current)
      if (reason !== undefined) return { kind: 'unstorable', path: path || '(body)', reason }
    } else if (typeof current === 'object' && current !== null) {
      if (depth >= maxDepth) return { kind: 'too_deep', path: path || '(body)' }
      const entries = Array.isArray(current) ? current.entries() : Object.entries(current)
      for (const [key, child] of entries) {
        if (typeof key === 'string') {
          const reason = unstorableText(key)
          if (reason !== undefined)
            return { kind: 'unstorable', path: `${path}.${JSON.stringify(key)}`, reason }
        }
        pending.push({
          value: child,
          path: path === '' ? String(key) : `${path}.${String(key)}`,
          depth: depth + 1,
        })
      }
    }
  }
  return undefined
}
