import { z } from 'zod'
import { valueAt } from '../json-pointer.js'
import { type Rejection, reject } from './verifiers/types.js'

const part = z.union([
  z
    .object({
      pointer: z.string().regex(/^\/.*$/, 'must be a JSON pointer such as /pspReference'),
    })
    .strict(),
  z
    .object({
      header: z
        .string()
        .regex(/^[a-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a header name in lower case, such as x-request-id'),
      /**
       * The operator vouches for this header (a proxy of theirs sets it). Without it, a header the
       * scheme does not sign is refused at start-up unless the source dedups on the body too
       * (src/inbound/verifiers/signed-parts.ts).
       */
      trusted: z.boolean().optional(),
    })
    .strict(),
])

/**
 * A source's dedup key when the provider's event id alone does not identify an event: several JSON
 * pointers and headers (Adyen: eventCode + pspReference), optionally scoped by event type. `version`
 * names the definition: the ledger records it per source and refuses at start-up a changed
 * definition under the same version (see src/db/dedup-keys.ts).
 */
export const dedupKeySchema = z
  .object({
    /** Absent: the provider's event id (as the verifier reads it) is the one part. */
    parts: z.array(part).min(1).max(8).optional(),
    /** `event_type`: the same parts under two event types are two events. */
    scope: z.enum(['event_type']).optional(),
    version: z.number().int().min(1).max(1_000_000).default(1),
  })
  .strict()

export type DedupKey = z.infer<typeof dedupKeySchema>
export type DedupKeyPart = NonNullable<DedupKey['parts']>[number]

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
