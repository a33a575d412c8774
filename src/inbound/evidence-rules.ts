import { z } from 'zod'
import { storableText, unstorableText } from '../db/text.js'
import { valueAt } from '../json-pointer.js'
// A longer key could never name an operation: operation keys are at most this long.
import { isInternalTool, MAX_KEY_LENGTH } from '../outbound/keys.js'

const pointer = z
  .string()
  .regex(/^\/.*$/, 'must be a JSON pointer such as /data/object/metadata/hookledger_key')

const SETTLES_EXAMPLE = '"settles": { "tools": ["stripe.charge"], "keyPrefixes": ["order_"] }'

const settlesSchema = z
  .object(
    {
      tools: z
        .array(
          z
            .string()
            .min(1)
            .max(128)
            .refine((tool) => !isInternalTool(tool), {
              message: 'names a tool of the service itself (forward, alert.*): evidence never settles those',
            }),
        )
        .min(1)
        .max(64)
        .optional(),
      keyPrefixes: z.array(z.string().min(1).max(MAX_KEY_LENGTH)).min(1).max(64).optional(),
    },
    { error: `is required: say what this rule may settle, e.g. ${SETTLES_EXAMPLE}` },
  )
  .strict()
  .refine((settles) => settles.tools !== undefined || settles.keyPrefixes !== undefined, {
    message: `needs "tools", "keyPrefixes" or both, e.g. ${SETTLES_EXAMPLE}`,
  })

/**
 * Which of a source's events say something about an outbound operation: the event types, where the
 * operation key sits in the event (where the provider echoes what the call sent, e.g. Stripe's
 * metadata), and optionally the downstream id and a marker that the effect did NOT happen.
 */
export const evidenceRuleSchema = z
  .object({
    eventTypes: z.array(z.string().min(1).max(200)).min(1).max(64),
    operationKey: pointer,
    downstreamId: pointer.optional(),
    /**
     * The event says the effect did not happen when the value at `pointer` is present (not null,
     * false or "") and, with `values`, one of them. Without `failure` every matching event is a success.
     */
    failure: z
      .object({ pointer, values: z.array(z.string().min(1)).min(1).max(64).optional() })
      .strict()
      .optional(),
    /**
     * What this rule may settle: operations of these tools, and/or whose key starts with one of these
     * prefixes (an agent's operation under `agents/<its key>`). Required: a signed event from this
     * source must not settle whatever key its body names (another team's charge, a forward).
     */
    settles: settlesSchema,
  })
  .strict()

export type EvidenceRule = z.infer<typeof evidenceRuleSchema>

export const evidenceRulesSchema = z
  .array(evidenceRuleSchema)
  .max(32)
  .superRefine((rules, ctx) => {
    // One event type, one reading: two rules for a type would let the config contradict itself.
    const seen = new Set<string>()
    for (const [index, rule] of rules.entries()) {
      for (const type of rule.eventTypes) {
        if (seen.has(type)) {
          ctx.addIssue({
            code: 'custom',
            path: [index, 'eventTypes'],
            message: `event type '${type}' is named by two evidence rules`,
          })
        }
        seen.add(type)
      }
    }
  })

/** What one event says about one operation. */
export interface Evidence {
  operationKey: string
  outcome: 'succeeded' | 'failed'
  downstreamId: string | null
  /** The failure marker's value, for a failure event. */
  failure: string | null
  /** The rule's `settles`: the settle statement applies the evidence only within it. */
  settles: EvidenceRule['settles']
}

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
