import type { Context } from 'hono'
import type { z } from 'zod'
import { ApiError } from './errors.js'

/** Parses a JSON body against `schema`; every problem becomes one 400 naming the fields. */
export async function parseJsonBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  let input: unknown
  try {
    input = JSON.parse(await c.req.text())
  } catch {
    throw new ApiError(400, 'invalid_json', 'the body must be JSON')
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
