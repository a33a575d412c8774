import { z } from 'zod'
import { jsonPointerSchema } from './json-pointer.js'
import { isInternalTool, MAX_KEY_LENGTH } from './operation-keys.js'

const pointer = jsonPointerSchema('/data/object/metadata/hookledger_key', { inside: true })

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
