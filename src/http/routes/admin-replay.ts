import { Hono } from 'hono'
import { z } from 'zod'
import {
  countReplayable,
  encodeReplayCursor,
  parseReplayCursor,
  type ReplayFilter,
  replayFailedByFilter,
} from '../../db/bulk-replay.js'
import type { Database } from '../../db/client.js'
import { eventStatus } from '../../db/schema.js'
import type { Logger } from '../../logger.js'
import type { Enqueuer } from '../../queue/enqueuer.js'
import { ApiError } from '../errors.js'
import { parseJsonBody } from '../validate.js'

/** The rows one call replays unless it says otherwise; a client follows `cursor` for the rest. */
export const REPLAY_CALL_DEFAULT = 10_000
const REPLAY_CALL_MAX = 100_000

const isoTime = z.iso.datetime({ offset: true }).transform((text) => new Date(text))

export const replayBody = z
  .object({
    status: z.enum(eventStatus.enumValues).default('failed'),
    source: z.string().min(1).max(200).optional(),
    type: z.string().min(1).max(200).optional(),
    from: isoTime.optional(),
    to: isoTime.optional(),
    route: z.string().min(1).max(200).optional(),
    by: z.string().min(1).max(200).default('admin-api'),
    dryRun: z.boolean().default(false),
    cursor: z.string().max(100).optional(),
    limit: z.number().int().min(1).max(REPLAY_CALL_MAX).default(REPLAY_CALL_DEFAULT),
  })
  .strict()
  .refine((body) => body.from === undefined || body.to === undefined || body.from < body.to, {
    message: "'from' must be before 'to'",
    path: ['from'],
  })

/** `POST /admin/api/events/replay`: the FAILED events of a filter, a resumable slice per call. */
export function adminReplayRoutes(deps: { db: Database; enqueuer: Enqueuer; logger: Logger }) {
  return new Hono().post('/events/replay', async (c) => {
    const body = await parseJsonBody(c, replayBody)
    if (body.status !== 'failed') {
      throw new ApiError(
        400,
        'status_not_replayable',
        `only FAILED events are replayed: a DONE event's effects happened, a ${body.status.toUpperCase()} one is the worker's`,
      )
    }
    const after = body.cursor === undefined ? undefined : parseReplayCursor(body.cursor)
    if (body.cursor !== undefined && after === undefined) {
      throw new ApiError(400, 'invalid_cursor', 'cursor: not a cursor this endpoint returned')
    }
    const filter: ReplayFilter = {
      source: body.source,
      type: body.type,
      from: body.from,
      to: body.to,
      route: body.route,
    }
    if (body.dryRun) return c.json({ dryRun: true, matched: await countReplayable(deps.db, filter) })
    let queued = true
    const result = await replayFailedByFilter(deps.db, {
      filter,
      by: body.by,
      after,
      limit: body.limit,
      requeue: async (ids) => {
        try {
          // Each row under its own job id, as a single replay is: one live job per row, so a replay
          // repeated while jobs still wait adds none twice. requeue asks Redis about the chunk's rows
          // together, so this costs about as much as the statement that flipped them.
          await deps.enqueuer.requeue(ids.map((id) => ({ id })))
        } catch (error) {
          queued = false
          deps.logger.warn(
            { err: error, count: ids.length },
            'replayed rows not requeued now; the relay will enqueue them',
          )
        }
      },
    })
    return c.json({
      dryRun: false,
      replayed: result.replayed,
      queued,
      cursor: result.next === undefined ? null : encodeReplayCursor(result.next),
    })
  })
}
