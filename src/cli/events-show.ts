import type { InferSelectModel } from 'drizzle-orm'
import { z } from 'zod'
import { openLedger } from '../db/client.js'
import { eventFilterConditions, findEvent, listEvents } from '../db/event-queries.js'
import { listEventRoutes } from '../db/event-routes.js'
import { listOperationsByKeyPrefix } from '../db/operation-queries.js'
import { inboundEvents } from '../db/schema.js'
import { workflowKeyPrefixes } from '../outbound/keys.js'
import { CliError, parseCommandLine, usageError } from './errors.js'
import { FILTER_OPTIONS, filterOfFlags } from './events-filter.js'
import type { CommandIo } from './sign.js'

/** listEvents serves pages of up to 500; a longer --limit reads several, printing as it goes. */
const PAGE = 500
const MAX_LIMIT = 1_000_000

type EventRow = InferSelectModel<typeof inboundEvents>

/** One event as a line (or a JSON object): what `list` and `tail` print. */
export function eventLine(
  event: Pick<EventRow, 'id' | 'source' | 'eventId' | 'eventType' | 'status' | 'attempts' | 'lastError'> & {
    receivedAt: Date | string
  },
): string {
  const at = typeof event.receivedAt === 'string' ? event.receivedAt : event.receivedAt.toISOString()
  const error = event.lastError === null ? '' : `  ${oneLine(event.lastError)}`
  return `${at}  ${event.id}  ${event.source}  ${event.eventId}  ${event.eventType ?? '-'}  ${event.status.toUpperCase()}  attempts ${event.attempts}${error}`
}

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ')
  return flat.length > 200 ? `${flat.slice(0, 199)}…` : flat
}

/** `hookledger events list`: newest first, keyset pages, each row printed as it is read. */
export async function listEventsCommand(args: string[], databaseUrl: string, io: CommandIo): Promise<number> {
  const { values } = parseCommandLine({
    args,
    options: { ...FILTER_OPTIONS, limit: { type: 'string', default: '50' }, json: { type: 'boolean' } },
    strict: true,
  })
  const limit = z.coerce.number().int().min(1).max(MAX_LIMIT).safeParse(values.limit)
  if (!limit.success) throw usageError(`--limit must be a whole number from 1 to ${MAX_LIMIT}`)
  const filter = filterOfFlags(values)
  const ledger = openLedger(databaseUrl, { max: 1 })
  try {
    let shown = 0
    let after: { receivedAt: Date; id: string } | undefined
    while (shown < limit.data) {
      const page = await listEvents(ledger.db, filter, { after, limit: Math.min(PAGE, limit.data - shown) })
      for (const event of page.events) {
        io.stdout(`${values.json === true ? JSON.stringify(event) : eventLine(event)}\n`)
      }
      shown += page.events.length
      if (page.next === undefined) break
      after = page.next
    }
    if (shown === 0 && values.json !== true) io.stderr('no events match\n')
    return 0
  } finally {
    await ledger.close()
  }
}

/** `hookledger events show ID`: by row id, or by the provider's event id (--source when it is in several). */
export async function showEventCommand(args: string[], databaseUrl: string, io: CommandIo): Promise<number> {
  const { values, positionals } = parseCommandLine({
    args,
    allowPositionals: true,
    options: { source: { type: 'string' }, json: { type: 'boolean' } },
    strict: true,
  })
  const [id] = positionals
  if (id === undefined || positionals.length !== 1)
    throw usageError('events show needs one event id or row id')
  const ledger = openLedger(databaseUrl, { max: 1 })
  try {
    let rowId = z.uuid().safeParse(id).success ? id : undefined
    if (rowId === undefined || (await findEvent(ledger.db, rowId)) === undefined) {
      const matches = await ledger.db
        .select({ id: inboundEvents.id, source: inboundEvents.source })
        .from(inboundEvents)
        .where(eventFilterConditions({ eventId: id, source: values.source }))
        .limit(10)
      if (matches.length > 1) {
        throw new CliError(
          `event id ${id} is in several sources (${matches.map((m) => m.source).join(', ')}): add --source`,
        )
      }
      rowId = matches[0]?.id
    }
    const detail = rowId === undefined ? undefined : await findEvent(ledger.db, rowId)
    if (detail === undefined || (values.source !== undefined && detail.event.source !== values.source)) {
      throw new CliError(`no event ${id}${values.source === undefined ? '' : ` in source ${values.source}`}`)
    }
    const { body: _body, headers: _headers, ...event } = detail.event
    const [routes, operations] = await Promise.all([
      listEventRoutes(ledger.db, event.id),
      listOperationsByKeyPrefix(ledger.db, workflowKeyPrefixes([event.source, event.eventId])),
    ])
    if (values.json === true) {
      const view = { event, routes, operations, attempts: detail.attempts, replays: detail.replays }
      io.stdout(`${JSON.stringify(view)}\n`)
      return 0
    }
    const lines = [
      `event     ${event.source} ${event.eventId} (${event.eventType ?? 'no type'})`,
      `row       ${event.id}`,
      `status    ${event.status.toUpperCase()}, attempts ${event.attempts}, replays ${event.replays}`,
      `received  ${event.receivedAt.toISOString()}${event.processedAt === null ? '' : `, processed ${event.processedAt.toISOString()}`}`,
      `error     ${event.lastError === null ? '-' : oneLine(event.lastError)}`,
      `routes    ${routes.length === 0 ? '-' : ''}`,
      ...routes.map(
        (r) =>
          `  ${r.routeId}  ${r.status.toUpperCase()}  attempts ${r.attempts}${r.responseStatus === null ? '' : `  HTTP ${r.responseStatus}`}${r.lastError === null ? '' : `  ${oneLine(r.lastError)}`}`,
      ),
      `operations ${operations.length === 0 ? '-' : ''}`,
      ...operations.map(
        (op) => `  ${op.operationKey}  ${op.tool} (${op.effectClass})  ${op.status}  attempts ${op.attempts}`,
      ),
      `attempts  ${detail.attempts.length === 0 ? '-' : ''}`,
      ...detail.attempts.map(
        (a) =>
          `  round ${a.replay} #${a.attempt}  ${a.outcome}  ${a.startedAt.toISOString()}${a.error === null ? '' : `  ${oneLine(a.error)}`}`,
      ),
    ]
    io.stdout(`${lines.map((line) => line.trimEnd()).join('\n')}\n`)
    return 0
  } finally {
    await ledger.close()
  }
}
