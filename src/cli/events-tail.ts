import { z } from 'zod'
import { openLedger } from '../db/client.js'
import { endedEvents, eventsAfter, newestEventPosition, type TailRow } from '../db/event-tail.js'
import { parseCommandLine, usageError } from './errors.js'
import { eventLine } from './events-show.js'
import type { CommandIo } from './sign.js'

const PAGE = 500
/** Events still running that tail waits on; beyond this the oldest are let go (and counted), so memory stays bounded. */
const MAX_WATCHED = 10_000

/**
 * `hookledger events tail`: polls the ledger for events received after it started, in (received_at,
 * id) order, prints each as it arrives and again when it ends DONE or FAILED. Ctrl-C stops it at the
 * next poll with exit status 0.
 */
export async function tailEventsCommand(args: string[], databaseUrl: string, io: CommandIo): Promise<number> {
  const { values } = parseCommandLine({
    args,
    options: {
      source: { type: 'string' },
      json: { type: 'boolean' },
      'interval-ms': { type: 'string', default: '500' },
    },
    strict: true,
  })
  const interval = z.coerce.number().int().min(50).max(60_000).safeParse(values['interval-ms'])
  if (!interval.success) throw usageError('--interval-ms must be a whole number from 50 to 60000')
  const ledger = openLedger(databaseUrl, { max: 1 })
  const source = values.source
  let stop: () => void = () => undefined
  let stopped = false
  const onSignal = () => {
    stopped = true
    stop()
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  const print = (kind: 'received' | 'done' | 'failed', row: TailRow) => {
    if (values.json === true) {
      const { event_id, event_type, last_error, received_at, ...rest } = row
      const view = { kind, ...rest, eventId: event_id, eventType: event_type, lastError: last_error }
      io.stdout(`${JSON.stringify({ ...view, receivedAt: received_at })}\n`)
      return
    }
    const line = eventLine({
      ...row,
      eventId: row.event_id,
      eventType: row.event_type,
      lastError: kind === 'received' ? null : row.last_error,
      receivedAt: row.received_at,
    })
    io.stdout(`${kind === 'received' ? '-->' : '<--'} ${line}\n`)
  }
  try {
    let after = await newestEventPosition(ledger.sql, source)
    const watched = new Map<string, TailRow>()
    let dropped = 0
    io.stderr(`following new events${source === undefined ? '' : ` of ${source}`}; Ctrl-C stops\n`)
    while (!stopped) {
      for (;;) {
        const rows = await eventsAfter(ledger.sql, { source, after, limit: PAGE })
        for (const row of rows) {
          print('received', row)
          if (row.status === 'done' || row.status === 'failed') print(row.status, row)
          else watched.set(row.id, row)
        }
        const last = rows.at(-1)
        if (last !== undefined) after = last
        if (rows.length < PAGE) break
      }
      for (const id of watched.keys()) {
        if (watched.size <= MAX_WATCHED) break
        watched.delete(id)
        dropped += 1
      }
      if (watched.size > 0) {
        const finished = await endedEvents(ledger.sql, [...watched.keys()])
        for (const row of finished) {
          watched.delete(row.id)
          print(row.status === 'done' ? 'done' : 'failed', row)
        }
      }
      if (stopped) break
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, interval.data)
        stop = () => {
          clearTimeout(timer)
          resolve()
        }
      })
    }
    if (dropped > 0) io.stderr(`stopped waiting on ${dropped} event(s) to keep memory bounded\n`)
    return 0
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    await ledger.close()
  }
}
