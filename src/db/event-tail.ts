import type postgres from 'postgres'

// The reads of `hookledger events tail` (src/cli/events-tail.ts): events in (received_at, id) order
// after a position, and which of the events it waits on have ended.

export interface TailRow {
  id: string
  source: string
  event_id: string
  event_type: string | null
  status: 'pending' | 'processing' | 'done' | 'failed'
  attempts: number
  last_error: string | null
  /** received_at as text with its microseconds: the keyset must not lose them (a JS Date would). */
  received_at: string
}

/** A place in the (received_at, id) order, received_at as TailRow has it. */
export type TailPosition = Pick<TailRow, 'received_at' | 'id'>

/** Before every event: a tail started from here prints the whole ledger. */
export const TAIL_START: TailPosition = {
  received_at: '-infinity',
  id: '00000000-0000-0000-0000-000000000000',
}

const columns = (sql: postgres.Sql) =>
  sql`id, source, event_id, event_type, status, attempts, last_error,
      to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as received_at`

const ofSource = (sql: postgres.Sql, source: string | undefined) =>
  source === undefined ? sql`true` : sql`source = ${source}`

/** The newest event's place (of one source, when given); TAIL_START when there is none. */
export async function newestEventPosition(
  sql: postgres.Sql,
  source: string | undefined,
): Promise<TailPosition> {
  const [newest] = await sql<TailPosition[]>`
    select to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as received_at, id
    from inbound_events where ${ofSource(sql, source)} order by received_at desc, id desc limit 1`
  return newest ?? TAIL_START
}

/** Up to `limit` events (of one source, when given) strictly after `after`, oldest first. */
export async function eventsAfter(
  sql: postgres.Sql,
  options: { source: string | undefined; after: TailPosition; limit: number },
): Promise<TailRow[]> {
  return sql<TailRow[]>`
    select ${columns(sql)} from inbound_events
    where ${ofSource(sql, options.source)}
      and (received_at, id) > (${options.after.received_at}::timestamptz, ${options.after.id}::uuid)
    order by received_at, id limit ${options.limit}`
}

/** Those of the events `ids` that ended DONE or FAILED, in the order they ended. */
export async function endedEvents(sql: postgres.Sql, ids: readonly string[]): Promise<TailRow[]> {
  return sql<TailRow[]>`
    select ${columns(sql)} from inbound_events
    where id = any(${ids as string[]}::uuid[]) and status in ('done', 'failed')
    order by processed_at nulls last, id`
}
