import { createHash } from 'node:crypto'
import type { SourceConfig } from '../config/config.js'
import { type OrderingKeyRow, SOURCE_SCOPE } from '../db/ordering.js'
import { parsePointer, resolvePointer } from '../json-pointer.js'
import { canonicalJson } from '../outbound/hash.js'

// An event's ordering keys, computed where it is claimed (receive.ts, a backfill pass) and written
// with its row; the worker's ordered scopes (src/delivery/ordering.ts) compute the same.

/** An ordering key compiled once: the pointer, and the key of an event (or none). */
export interface OrderingKey {
  pointer: string
  /** The event's key hash, or undefined when the event has no value at the pointer. */
  of(event: unknown): string | undefined
}

export function compileOrderingKey(pointer: string): OrderingKey {
  const path = parsePointer(pointer)
  return {
    pointer,
    of(event) {
      const resolved = resolvePointer(event, path)
      // An event without the key (or a body that is not JSON) is not ordered against anything.
      if (!resolved.found) return undefined
      // Canonical JSON, so key order and number spelling never split one key in two; the pointer
      // is hashed too, so a changed pointer never meets the keys written under the old one.
      return createHash('sha256')
        .update(`${pointer}\n${canonicalJson(resolved.value)}`)
        .digest('hex')
    },
  }
}

const compiledKeys = new WeakMap<SourceConfig, Array<{ routeId: string; key: OrderingKey }>>()

/**
 * An event's keys in each ordered scope of its source (its own orderingKey, each route's), written
 * with its claim so the head lookup finds it before any worker has looked at it.
 */
export function orderingKeysOf(source: SourceConfig, event: unknown): OrderingKeyRow[] {
  let keys = compiledKeys.get(source)
  if (keys === undefined) {
    keys = [
      ...(source.orderingKey === undefined
        ? []
        : [{ routeId: SOURCE_SCOPE, key: compileOrderingKey(source.orderingKey) }]),
      ...(source.routes ?? []).flatMap((route) =>
        route.orderingKey === undefined
          ? []
          : [{ routeId: route.id, key: compileOrderingKey(route.orderingKey) }],
      ),
    ]
    compiledKeys.set(source, keys)
  }
  return keys.flatMap(({ routeId, key }) => {
    const keyHash = key.of(event)
    return keyHash === undefined ? [] : [{ routeId, keyHash }]
  })
}
