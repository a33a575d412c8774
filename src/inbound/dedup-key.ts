import type { DedupKey } from '../config/dedup-key.js'
import { valueAt } from '../json-pointer.js'
import { type Rejection, reject } from './verifiers/types.js'

/**
 * What a definition is compared by across restarts: everything but its version, and but whether a
 * header is trusted (that changes whether the key is allowed, not which events it makes equal).
 */
export interface DedupKeyDefinition {
  parts: Array<{ pointer: string } | { header: string } | { eventId: 'provider' }>
  scope: 'event_type' | null
}

/** The definition every source had before dedup keys existed: the provider's event id, version 1. */
export const PROVIDER_EVENT_ID: DedupKeyDefinition = { parts: [{ eventId: 'provider' }], scope: null }

export function definitionOf(key: DedupKey | undefined): DedupKeyDefinition {
  if (key === undefined) return PROVIDER_EVENT_ID
  const parts = key.parts?.map((part) =>
    'pointer' in part ? { pointer: part.pointer } : { header: part.header },
  )
  return { parts: parts ?? [{ eventId: 'provider' }], scope: key.scope ?? null }
}

const MAX_KEY_LENGTH = 1024

/**
 * The ledger's event id for a delivery under a composite key: `dk<version>:` and each part,
 * percent-encoded (so a ':' inside a part cannot make two keys equal), joined by ':'. The prefix keeps
 * these ids apart from provider ids and from another version's keys. Fails closed: a part that is
 * missing, empty or not a string or integer is `missing_event_id`, never a key made of empty strings.
 */
export function buildDedupKey(
  key: DedupKey,
  delivery: {
    providerEventId: string
    eventType: string | null
    event: unknown
    headers: Readonly<Record<string, string>>
  },
): string | Rejection {
  const values: string[] = []
  if (key.scope === 'event_type') {
    if (delivery.eventType === null || delivery.eventType.trim() === '') {
      return reject('missing_event_id', 'the dedup key is scoped by event type, and this event has none')
    }
    values.push(delivery.eventType)
  }
  for (const source of key.parts ?? [{ eventId: 'provider' as const }]) {
    const value =
      'eventId' in source
        ? delivery.providerEventId
        : 'pointer' in source
          ? scalarText(valueAt(delivery.event, source.pointer))
          : (delivery.headers[source.header] ?? null)
    const where =
      'eventId' in source
        ? 'the event id'
        : 'pointer' in source
          ? `the body's ${source.pointer}`
          : `the ${source.header} header`
    if (value === null || value.trim() === '') {
      return reject('missing_event_id', `dedup key part ${where} is missing or empty`)
    }
    values.push(value)
  }
  let encoded: string
  try {
    encoded = values.map((value) => encodeURIComponent(value)).join(':')
  } catch {
    return reject('invalid_event_id', 'a dedup key part is not valid Unicode text')
  }
  const eventId = `dk${key.version}:${encoded}`
  if (eventId.length > MAX_KEY_LENGTH) {
    return reject('invalid_event_id', `the dedup key is longer than ${MAX_KEY_LENGTH} characters`)
  }
  return eventId
}

function scalarText(value: unknown): string | null {
  if (typeof value === 'string') return value
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value)
  return null
}
