import { z } from 'zod'
import type { EventCursor, EventFilter, PayloadMatch } from '../../db/event-queries.js'
import { eventStatus } from '../../db/schema.js'
import { unstorableText } from '../../db/text.js'

/**
 * Text a search compares with the ledger, refused like any other bad input (400) when PostgreSQL
 * cannot take it: a NUL fails the statement (a 500 that logged the query's parameters), and a lone
 * surrogate matches nothing stored.
 */
export function searchText(max: number) {
  return z.string().trim().max(max).superRefine(storable)
}

/** The refinement of `searchText`, for text that is compared as it is (an operation key). */
export function storable(value: string, ctx: z.RefinementCtx): void {
  const reason = unstorableText(value)
  if (reason !== undefined) ctx.addIssue({ code: 'custom', message: reason })
}

// An empty form field means "any": browsers send every field of a GET form, filled or not.
const optionalText = (max: number) =>
  searchText(max)
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

const MAX_PATH_KEYS = 16

/**
 * `data.object.customer = cus_123`: a dotted path (digits index an array), '=', a value. The value
 * is read as JSON when it is a number, true, false, null or a "quoted string", else as the text
 * itself, so `amount = 42` finds the number and `amount = "42"` the string.
 */
export const payloadMatch = searchText(1000)
  .transform((text, ctx): PayloadMatch | undefined => {
    if (text === '') return undefined
    const at = text.indexOf('=')
    const path = (at < 0 ? '' : text.slice(0, at)).trim().split('.')
    const raw = text.slice(at + 1).trim()
    if (at < 0 || path.some((key) => key.trim() === '') || path.length > MAX_PATH_KEYS) {
      ctx.addIssue({
        code: 'custom',
        message: `write a JSON path, '=' and a value, e.g. data.object.customer = cus_123 (at most ${MAX_PATH_KEYS} keys)`,
      })
      return z.NEVER
    }
    return { path: path.map((key) => key.trim()), value: scalarOf(raw) }
  })
  .optional()

function scalarOf(raw: string): PayloadMatch['value'] {
  try {
    const value: unknown = JSON.parse(raw)
    if (value === null || ['string', 'number', 'boolean'].includes(typeof value)) {
      return value as PayloadMatch['value']
    }
  } catch {
    // Not JSON: the text itself, the common case (ids like cus_123).
  }
  return raw
}

export const eventsQuery = z
  .object({
    source: optionalText(200),
    status: z
      .union([z.literal(''), z.enum(eventStatus.enumValues)])
      .transform((value) => (value === '' ? undefined : value))
      .optional(),
    type: optionalText(200),
    route: optionalText(200),
    event_id: optionalText(500),
    payload: payloadMatch,
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
  return {
    source: query.source,
    status: query.status,
    type: query.type,
    route: query.route,
    from: query.from,
    to: query.to,
    eventId: query.event_id,
    payload: query.payload,
  }
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
    ['route', filter.route],
    ['from', filter.from?.toISOString()],
    ['to', filter.to?.toISOString()],
    ['event_id', filter.eventId],
    ['payload', filter.payload === undefined ? undefined : describePayload(filter.payload)],
  ]
  return pairs.filter((pair): pair is [string, string] => pair[1] !== undefined)
}

/** The match as a person writes it (and as the query string carries it). */
export function describePayload(match: PayloadMatch): string {
  const value =
    typeof match.value === 'string' && scalarOf(match.value) === match.value
      ? match.value
      : JSON.stringify(match.value)
  return `${match.path.join('.')} = ${value}`
}

/** zod's issues as one sentence a person can read on the page. */
export function describeIssues(error: z.ZodError): string {
  return error.issues.map((issue) => `${issue.path.join('.') || 'query'}: ${issue.message}`).join('; ')
}
