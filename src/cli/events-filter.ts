import { z } from 'zod'
import type { EventFilter } from '../db/event-queries.js'
import { eventStatus } from '../db/schema.js'
import { parseSince } from './backfill.js'
import { usageError } from './errors.js'

/** The flags every events subcommand that filters shares (parseArgs options). */
export const FILTER_OPTIONS = {
  source: { type: 'string' },
  type: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  route: { type: 'string' },
  status: { type: 'string' },
} as const

const status = z.enum(eventStatus.enumValues)

/** The filter flags as a ledger filter; a wrong status or time is a usage error naming the flag. */
export function filterOfFlags(values: {
  source?: string | undefined
  type?: string | undefined
  since?: string | undefined
  until?: string | undefined
  route?: string | undefined
  status?: string | undefined
}): EventFilter {
  const parsedStatus = values.status === undefined ? undefined : status.safeParse(values.status)
  if (parsedStatus !== undefined && !parsedStatus.success) {
    throw usageError(`--status must be one of ${eventStatus.enumValues.join(', ')}; got '${values.status}'`)
  }
  const now = Date.now()
  const from = values.since === undefined ? undefined : parseSince(values.since, now)
  const to = values.until === undefined ? undefined : timeOf(values.until, now, '--until')
  if (from !== undefined && to !== undefined && from >= to) throw usageError('--since must be before --until')
  return {
    source: values.source,
    type: values.type,
    from,
    to,
    route: values.route,
    status: parsedStatus?.data,
  }
}

/** parseSince's reading of a time, named after the flag it came from. */
function timeOf(text: string, now: number, flag: string): Date {
  try {
    return parseSince(text, now)
  } catch (error) {
    if (error instanceof Error) error.message = error.message.replaceAll('--since', flag)
    throw error
  }
}
