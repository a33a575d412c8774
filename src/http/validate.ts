import type { Context } from 'hono'
import type { z } from 'zod'
import { findJsonProblem } from '../db/text.js'
import { ApiError } from './errors.js'

/** Deeper than any request body of this API needs; far below what would overflow a recursive walk. */
export const MAX_JSON_DEPTH = 64

/** Parses a JSON body against `schema`; every problem becomes one 400 naming the fields. */
export async function parseJsonBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  let input: unknown
  try {
    input = JSON.parse(await c.req.text())
  } catch {
    throw new ApiError(400, 'invalid_json', 'the body must be JSON')
  }
  // Before the schema: zod, hashing and jsonb all recurse, and text Postgres cannot store would fail
  // the statement with a 500 instead of naming the field.
  const problem = findJsonProblem(input, MAX_JSON_DEPTH)
  if (problem?.kind === 'too_deep') {
    throw new ApiError(400, 'json_too_deep', `${problem.path}: nested deeper than ${MAX_JSON_DEPTH} levels`)
  }
  if (problem?.kind === 'unstorable') {
    throw new ApiError(400, 'unstorable_text', `${problem.path}: ${problem.reason}`)
  }
  const parsed = schema.safeParse(input)
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (issue) => `${issue.path.join('.') || '(body)'}: ${issue.message}`,
    )
    throw new ApiError(400, 'invalid_request', problems.join('; '))
  }
  return parsed.data
}
