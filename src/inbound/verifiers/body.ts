import type { Verification } from '../../config/verifier.js'
import { valueAt } from '../../json-pointer.js'
import { type Rejection, reject } from './types.js'

const MAX_EVENT_ID_LENGTH = 255

/**
 * Checks a provider's event id. An empty id must never become a key: it would make every later
 * event without an id a "duplicate" of the first one.
 */
export function readEventId(value: string | undefined, where: string): string | Verification {
  if (value === undefined || value.trim() === '') {
    return reject('missing_event_id', `${where} is missing or empty`)
  }
  if (value.length > MAX_EVENT_ID_LENGTH || !/^[\x21-\x7e]+$/.test(value)) {
    return reject('invalid_event_id', `${where} must be 1 to ${MAX_EVENT_ID_LENGTH} visible ASCII characters`)
  }
  return value
}

export type ParsedBody = { kind: 'parsed'; value: unknown; type: string | null } | Rejection

const decoder = new TextDecoder('utf-8', { fatal: true })

/** Parses a verified body; runs only after the signature matched (never parse unverified input). */
export function parseJsonBody(raw: Uint8Array): ParsedBody {
  let value: unknown
  try {
    value = JSON.parse(decoder.decode(raw))
  } catch {
    return { kind: 'rejected', code: 'invalid_json', message: 'the body is not valid UTF-8 JSON' }
  }
  const type =
    typeof value === 'object' && value !== null && 'type' in value && typeof value.type === 'string'
      ? value.type
      : null
  return { kind: 'parsed', value, type }
}

/** Reads an event id from a parsed body. Integer ids become their decimal text; anything else fails. */
export function readEventIdAt(document: unknown, pointer: string): string | Verification {
  const value = valueAt(document, pointer)
  const where = `the body's ${pointer === '' ? 'root' : pointer}`
  if (typeof value === 'number' && Number.isSafeInteger(value)) return readEventId(String(value), where)
  if (value !== undefined && value !== null && typeof value !== 'string') {
    return reject('invalid_event_id', `${where} must be a string or an integer`)
  }
  return readEventId(value ?? undefined, where)
}

/** A string at `pointer`, or null: event types are informational and never block a delivery. */
export function stringAt(document: unknown, pointer: string): string | null {
  const value = valueAt(document, pointer)
  return typeof value === 'string' ? value : null
}
