import { z } from 'zod'
import type { EventCursor, EventFilter } from '../../db/event-queries.js'
import { eventStatus } from '../../db/schema.js'

// An empty form field means "any": browsers send every field of a GET form, filled or not.
const optionalText = (max: number) =>
  z
    .string()
    .trim()
    .max(max)
    .transform((value) => (value === '' ? undefined : value))
    .optional()

// `datetime-local` inputs send "2026-12-03T08:15" with no zone; the page says UTC, so read it as UTC.
const LOCAL = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/
const optionalTime = z
  .string()
  .trim()
  .transform((value, ctx) => {
    if (value === '') return undefined
    const date = new Date(LOCAL.test(value) ? `${value}Z` : value)
    if (Number.isNaN(date.getTime())) {
      ctx.addIssue({ code: 'custom', message: `'${value}' is not a time (use 2026-12-03T08:15, UTC)` })
      return z.NEVER
    }
    return date
  })
  .optional()

// `<ISO time>_<row uuid>`: the last row of the previous page, readable in the address bar.
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)_([0-9a-f-]{36})$/i
const cursor = z
  .string()
  .transform((value, ctx): EventCursor | undefined => {
    if (value === '') return undefined
    const match = CURSOR.exec(value)
    const id = match?.[2]
    const at = match?.[1] === undefined ? undefined : new Date(match[1])
    if (
      id === undefined ||
      at === undefined ||
      Number.isNaN(at.getTime()) ||
      !z.uuid().safeParse(id).success
    ) {
      ctx.addIssue({
        code: 'custom',
        message: 'not a page position this page made; start from the first page',
      })
      return z.NEVER
    }
    return { receivedAt: at, id }
  })
  .optional()

export const eventsQuery = z
  .object({
    source: optionalText(200),
    status: z
      .union([z.literal(''), z.enum(eventStatus.enumValues)])
      .transform((value) => (value === '' ? undefined : value))
      .optional(),
    type: optionalText(200),
    from: optionalTime,
    to: optionalTime,
    after: cursor,
  })
  .refine((q) => q.from === undefined || q.to === undefined || q.from < q.to, {
    message: "'from' must be before 'to'",
    path: ['from'],
  })

export type EventsQuery = z.infer<typeof eventsQuery>

export function filterOf(query: EventsQuery): EventFilter {
  return { source: query.source, status: query.status, type: query.type, from: query.from, to: query.to }
}

export function encodeCursor(at: EventCursor): string {
  return `${at.receivedAt.toISOString()}_${at.id}`
}

/** The filter as query-string pairs (empty fields left out), for links and hidden form fields. */
export function filterParams(filter: EventFilter): Array<[string, string]> {
  const pairs: Array<[string, string | undefined]> = [
    ['source', filter.source],
    ['status', filter.status],
    ['type', filter.type],
    ['from', filter.from?.toISOString()],
    ['to', filter.to?.toISOString()],
  ]
  return pairs.filter((pair): pair is [string, string] => pair[1] !== undefined)
}

/** zod's issues as one sentence a person can read on the page. */
export function describeIssues(error: z.ZodError): string {
  return error.issues.map((issue) => `${issue.path.join('.') || 'query'}: ${issue.message}`).join('; ')
}
