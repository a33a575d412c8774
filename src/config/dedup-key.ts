import { z } from 'zod'
import { jsonPointerSchema } from './json-pointer.js'

const part = z.union([
  z
    .object({
      pointer: jsonPointerSchema('/pspReference', { inside: true }),
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
       * (src/config/signed-parts.ts).
       */
      trusted: z.boolean().optional(),
    })
    .strict(),
])

/**
 * A source's dedup key when the provider's event id alone does not identify an event: several JSON
 * pointers and headers (Adyen: eventCode + pspReference), optionally scoped by event type. `version`
 * names the definition: the ledger records it per source and refuses at start-up a changed
 * definition under the same version (see src/inbound/dedup-key-drift.ts).
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
