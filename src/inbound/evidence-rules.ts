import type { EvidenceRule } from '../config/evidence.js'
// A longer key could never name an operation: operation keys are at most this long.
import { MAX_KEY_LENGTH } from '../config/operation-keys.js'
import type { Evidence } from '../db/evidence.js'
import { storableText, unstorableText } from '../db/text.js'
import { valueAt } from '../json-pointer.js'

export type EvidenceReading =
  | { kind: 'evidence'; evidence: Evidence }
  /** No rule names this event type: the event is not evidence of anything. */
  | { kind: 'not_evidence' }
  /** A rule names the type but the event has no usable key (a charge not made through this ledger). */
  | { kind: 'no_key'; message: string }

/** Reads an event against a source's rules. The body is the verified, stored one. */
export function readEvidence(
  rules: readonly EvidenceRule[],
  event: { eventType: string | null; body: unknown },
): EvidenceReading {
  if (event.eventType === null) return { kind: 'not_evidence' }
  const rule = rules.find((r) => r.eventTypes.includes(event.eventType ?? ''))
  if (rule === undefined) return { kind: 'not_evidence' }
  const key = scalarText(valueAt(event.body, rule.operationKey))
  // A key Postgres cannot store (a NUL) cannot name an operation either; it must not fail the event.
  if (key === null || key.length > MAX_KEY_LENGTH || unstorableText(key) !== undefined) {
    return {
      kind: 'no_key',
      message: `no operation key (a string of 1-${MAX_KEY_LENGTH} characters) at ${rule.operationKey}`,
    }
  }
  const downstream =
    rule.downstreamId === undefined ? null : scalarText(valueAt(event.body, rule.downstreamId))
  const downstreamId = downstream === null ? null : storableText(downstream.slice(0, 500))
  const failure = rule.failure === undefined ? null : failureMarker(rule.failure, event.body)
  return {
    kind: 'evidence',
    evidence: {
      operationKey: key,
      outcome: failure === null ? 'succeeded' : 'failed',
      downstreamId,
      failure,
      settles: rule.settles,
    },
  }
}

function failureMarker(rule: NonNullable<EvidenceRule['failure']>, body: unknown): string | null {
  const value = valueAt(body, rule.pointer)
  if (value === undefined || value === null || value === false || value === '') return null
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  if (rule.values !== undefined && !rule.values.includes(text)) return null
  return storableText(text.slice(0, 500))
}

/** A string or integer as text; anything else (an object, an empty string) is no value. */
function scalarText(value: unknown): string | null {
  if (typeof value === 'string') return value.trim() === '' ? null : value
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value)
  return null
}
