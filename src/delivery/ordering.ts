import type postgres from 'postgres'
import { findOrderingHead, type OrderingHead, type OrderingKeyValue } from '../db/ordering.js'
import { RetryLaterError, type SourceHandler } from '../handlers/types.js'
import { parsePointer, resolvePointer } from './filter.js'

export interface OrderingSettings {
  /** How soon a delivery behind a head that is still being worked on looks again. */
  recheckMs: number
  /** How soon one behind a FAILED head looks again: nothing moves until a person replays it. */
  failedHeadRecheckMs: number
}

/** An ordering key compiled once: the pointer's tokens, and the key of an event (or none). */
export interface OrderingKey {
  pointer: string
  /** The event's key: the value at the pointer, or undefined when the event has none. */
  of(event: unknown): OrderingKeyValue | undefined
}

export function compileOrderingKey(pointer: string): OrderingKey {
  const path = parsePointer(pointer)
  return {
    pointer,
    of(event) {
      const resolved = resolvePointer(event, path)
      // An event without the key (or a body that is not JSON) is not ordered against anything.
      if (!resolved.found) return undefined
      // Which steps go through an array, so the head query's containment document has its shape.
      const inArray = path.map((_, index) => {
        const parent = resolvePointer(event, path.slice(0, index))
        return parent.found && Array.isArray(parent.value)
      })
      return { path, inArray, value: resolved.value }
    },
  }
}

/**
 * Holds back a delivery while an earlier event with the same ordering key is not done: the event
 * goes back to the queue without using up an attempt. Returns the head that blocks, for the caller's
 * message, or undefined when the delivery may go.
 */
export async function waitForOrder(
  sql: postgres.Sql,
  key: OrderingKey,
  context: { eventRowId: string; event: unknown },
  settings: OrderingSettings,
  routeId?: string,
): Promise<void> {
  const value = key.of(context.event)
  if (value === undefined) return
  const head = await findOrderingHead(sql, context.eventRowId, value, routeId)
  if (head === undefined) return
  throw new RetryLaterError(blockedMessage(key, head, routeId), recheckOf(head, settings))
}

export function blockedMessage(key: OrderingKey, head: OrderingHead, routeId?: string): string {
  const where = routeId === undefined ? '' : ` on route '${routeId}'`
  return `waits for event ${head.eventId} (${head.status}), which has the same ordering key (${key.pointer})${where} and came first`
}

function recheckOf(head: OrderingHead, settings: OrderingSettings): number {
  return head.status === 'failed' ? settings.failedHeadRecheckMs : settings.recheckMs
}

/** A source's handler behind its ordering key: the same handler, run only once the event is first in line. */
export function orderedHandler(
  handler: SourceHandler,
  key: OrderingKey,
  sql: postgres.Sql,
  settings: OrderingSettings,
): SourceHandler {
  if (handler.kind === 'direct') {
    return {
      kind: 'direct',
      run: async (context) => {
        await waitForOrder(sql, key, context, settings)
        return handler.run(context)
      },
    }
  }
  return {
    kind: 'transactional',
    run: async (context) => {
      await waitForOrder(sql, key, context, settings)
      return handler.run(context)
    },
  }
}
