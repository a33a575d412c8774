/**
 * An error as it may be logged and stored: the real cause, never a statement's parameters. drizzle
 * wraps a failing query in an error whose message repeats the query and its parameters (the event's
 * payload, say), while the database's own message sits in `cause`.
 */
export function describeError(error: unknown): { name: string; message: string; code?: string } {
  let current: unknown = error
  while (current instanceof Error && isQueryWrapper(current) && current.cause instanceof Error) {
    current = current.cause
  }
  if (!(current instanceof Error)) return { name: 'Error', message: String(current) }
  const code = (current as { code?: unknown }).code
  return { name: current.name, message: current.message, ...(typeof code === 'string' ? { code } : {}) }
}

function isQueryWrapper(error: Error): boolean {
  return 'params' in error && 'query' in error
}
