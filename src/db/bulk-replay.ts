import { and, count, eq } from 'drizzle-orm'
import type { Database } from './client.js'
import { type EventFilter, eventFilterConditions } from './event-queries.js'
import { flipFailed, type ReplayPosition } from './replay.js'
import { inboundEvents } from './schema.js'

/** Rows one statement flips: a short lock, and a bounded list of ids in memory at any time. */
export const REPLAY_CHUNK = 1000

/** What a bulk replay replays: the FAILED events of a filter (its status, if any, is ignored). */
export type ReplayFilter = Omit<EventFilter, 'status'>

export interface BulkReplayOptions {
  filter: ReplayFilter
  /** Recorded in event_replays.by. */
  by: string
  /** Continue after this position (the `cursor` of an earlier, unfinished call). */
  after?: ReplayPosition | undefined
  /** Stop after this many rows (a resumable slice); unset: the whole filter. */
  limit?: number | undefined
  /** Hands a chunk's flipped rows to the queue. Unset: the relay enqueues them (relay.graceMs). */
  requeue?: ((ids: readonly string[]) => Promise<void>) | undefined
  /** After each chunk, with the running total. */
  onChunk?: ((replayed: number) => void) | undefined
  /** Checked between chunks: a chunk is one statement and always commits whole. */
  stopped?: (() => boolean) | undefined
  chunkSize?: number | undefined
}

export interface BulkReplayResult {
  replayed: number
  /** Where to continue; undefined when the filter has no FAILED row left after this call. */
  next: ReplayPosition | undefined
}

/** How many FAILED events the filter holds now: what a replay of it would replay (a dry run). */
export async function countReplayable(db: Database, filter: ReplayFilter): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(inboundEvents)
    .where(and(eq(inboundEvents.status, 'failed'), eventFilterConditions(filter)))
  return row?.n ?? 0
}

/**
 * Replays the FAILED events of a filter, oldest first, one chunk per statement: each chunk commits on
 * its own, so an interrupted replay keeps what it did, and running it again replays only what is
 * still FAILED (a row already PENDING again or DONE is not a FAILED row, so nothing is sent twice
 * that the first run settled). Memory holds one chunk of ids, whatever the filter's size. The admin
 * API, the admin page and `hookledger events replay` all replay through this.
 */
export async function replayFailedByFilter(
  db: Database,
  options: BulkReplayOptions,
): Promise<BulkReplayResult> {
  const chunkSize = options.chunkSize ?? REPLAY_CHUNK
  const where = eventFilterConditions(options.filter)
  let after = options.after
  let replayed = 0
  for (;;) {
    const room = options.limit === undefined ? chunkSize : Math.min(chunkSize, options.limit - replayed)
    if (room <= 0 || options.stopped?.() === true) return { replayed, next: after }
    const rows = await flipFailed(db, where, options.by, room, after)
    if (rows.length > 0) await options.requeue?.(rows.map((row) => row.id))
    replayed += rows.length
    options.onChunk?.(replayed)
    const last = rows.at(-1)
    if (last === undefined || rows.length < room) return { replayed, next: undefined }
    after = { receivedAt: last.receivedAt, id: last.id }
  }
}

const CURSOR =
  /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i

/** `<received_at with microseconds>_<row id>`: readable, and what `parseReplayCursor` reads back. */
export function encodeReplayCursor(at: ReplayPosition): string {
  return `${at.receivedAt}_${at.id}`
}

/** A cursor `encodeReplayCursor` made, or undefined when the text is not one. */
export function parseReplayCursor(text: string): ReplayPosition | undefined {
  const match = CURSOR.exec(text)
  const receivedAt = match?.[1]
  const id = match?.[2]
  if (receivedAt === undefined || id === undefined || Number.isNaN(Date.parse(receivedAt))) return undefined
  return { receivedAt, id: id.toLowerCase() }
}
