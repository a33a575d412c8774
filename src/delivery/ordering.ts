import type postgres from 'postgres'
import {
  catchUpOrderingKeys,
  findOrderingHead,
  type OrderingHead,
  recordOrderingKey,
  releaseOrderingKey,
  SOURCE_SCOPE,
} from '../db/ordering.js'
import { compileOrderingKey, type OrderingKey } from '../inbound/ordering-keys.js'
import type { Logger } from '../logger.js'
import { RetryLaterError, type SourceHandler } from '../queue/handler.js'

export interface OrderingSettings {
  /**
   * How soon the event right behind a head that is still being worked on looks again: the fallback
   * for a hand-off that did not happen (a worker that died between DONE and the hand-off).
   */
  recheckMs: number
  /**
   * How soon one behind a FAILED head looks again (nothing moves until a person replays it), and
   * one with other events between it and the head: each of those is handed the key in turn.
   */
  failedHeadRecheckMs: number
  /** Starts an event in `delayMs` (a job of its own): the next of a key whose event just finished. */
  handOff: (eventRowId: string, delayMs: number) => Promise<unknown>
  logger: Logger
}

/** One ordered scope at run time: a source's own key, or a route's. */
export interface OrderedScope {
  key: OrderingKey
  /**
   * Holds back a delivery while an earlier event with the same key is not done: throws a quiet
   * RetryLaterError (no attempt used up; logged at debug, summed up per key once a minute).
   */
  wait(context: { eventRowId: string; event: unknown }): Promise<void>
  /** The event is done in this scope: the next one of its key starts now. Never throws. */
  release(eventRowId: string): Promise<void>
}

const SUMMARY_EVERY_MS = 60_000
/** The hand-off's delay to an event that is leased: a look at the line takes a few ms. */
const RUNNING_HAND_OFF_MS = 100

export function orderedScope(
  sql: postgres.Sql,
  settings: OrderingSettings,
  scope: { source: string; routeId?: string | undefined; pointer: string },
): OrderedScope {
  const key = compileOrderingKey(scope.pointer)
  const routeId = scope.routeId ?? SOURCE_SCOPE
  const where = scope.routeId === undefined ? '' : ` on route '${scope.routeId}'`
  const labels = { source: scope.source, ...(scope.routeId === undefined ? {} : { route: scope.routeId }) }
  // Events claimed before this version, or before the key was configured, get their key rows once,
  // before this process's first lookup; later claims write theirs.
  let caughtUp: Promise<unknown> | undefined
  const catchUp = () => {
    caughtUp ??= catchUpOrderingKeys(sql, scope.source, routeId, (body) => {
      try {
        return key.of(JSON.parse(body.toString('utf8')))
      } catch {
        return undefined
      }
    }).catch((error: unknown) => {
      caughtUp = undefined
      throw error
    })
    return caughtUp
  }
  const summaries = new Map<string, { since: number; waits: number }>()
  const noteWait = (keyHash: string, eventRowId: string, head: OrderingHead) => {
    const now = Date.now()
    const summary = summaries.get(keyHash)
    const fields = { ...labels, pointer: key.pointer, key: keyHash.slice(0, 12), eventRowId, head: head.id }
    settings.logger.debug(fields, 'held back by its ordering key')
    if (summary !== undefined && now - summary.since < SUMMARY_EVERY_MS) {
      summary.waits += 1
      return
    }
    settings.logger.info(
      { ...fields, headStatus: head.status, rechecks: summary?.waits ?? 0 },
      'ordering key held: events wait for the one before them (rechecks counts the last minute)',
    )
    summaries.set(keyHash, { since: now, waits: 1 })
    for (const [other, { since }] of summaries) {
      if (now - since >= SUMMARY_EVERY_MS) summaries.delete(other)
    }
  }
  return {
    key,
    async wait(context) {
      const keyHash = key.of(context.event)
      if (keyHash === undefined) return
      await catchUp()
      const { head, recorded } = await findOrderingHead(sql, context.eventRowId, routeId, keyHash)
      if (!recorded) await recordOrderingKey(sql, context.eventRowId, routeId, keyHash)
      if (head === undefined) return
      noteWait(keyHash, context.eventRowId, head)
      throw new RetryLaterError(
        blockedMessage(key, head, where),
        head.status === 'failed' || head.behindOthers ? settings.failedHeadRecheckMs : settings.recheckMs,
        true,
      )
    },
    async release(eventRowId) {
      try {
        const next = await releaseOrderingKey(sql, eventRowId, routeId)
        // One still running may be looking at the line right now, before this DONE: its job comes
        // once it has put the event back, or finds it done or leased (one lease query).
        if (next !== undefined)
          await settings.handOff(next.id, next.state === 'waiting' ? 0 : RUNNING_HAND_OFF_MS)
      } catch (error) {
        // The next event's recheck timer still starts it; only the hand-off's speed is lost.
        settings.logger.warn(
          { ...labels, eventRowId, err: error instanceof Error ? error.message : String(error) },
          'ordering key not handed off; the next event starts at its recheck',
        )
      }
    },
  }
}

function blockedMessage(key: OrderingKey, head: OrderingHead, where: string): string {
  return `waits for event ${head.eventId} (${head.status}), which has the same ordering key (${key.pointer})${where} and came first`
}

/** A source's handler behind its ordering key: run only once the event is first in line, and hand off after. */
export function orderedHandler(handler: SourceHandler, scope: OrderedScope): SourceHandler {
  const done = async (eventRowId: string) => {
    await handler.done?.(eventRowId)
    await scope.release(eventRowId)
  }
  const before = handler.before
  if (handler.kind === 'direct') {
    return {
      kind: 'direct',
      run: async (context, releaseSlot) => {
        await scope.wait(context)
        return handler.run(context, releaseSlot)
      },
      before,
      done,
    }
  }
  return {
    kind: 'transactional',
    run: async (context) => {
      await scope.wait(context)
      return handler.run(context)
    },
    before,
    done,
  }
}
