import { z } from 'zod'
import { backfillConfigSchema, backfillProblems } from './backfill.js'
import { dedupKeySchema } from './dedup-key.js'
import { evidenceRulesSchema } from './evidence.js'
import { orderingKeySchema, routeForwardSchema, routesSchema } from './routes.js'
import { verifyConfigSchema } from './verify.js'

const SOURCE_ID = /^[a-z0-9][a-z0-9_-]{0,62}$/

/** How long a source keeps its DONE events when its config does not say (`retentionDays`). */
export const DEFAULT_RETENTION_DAYS = 30

const forwardHandlerSchema = z.object({
  /**
   * `forward`: POST each event's raw body and signature headers to `url`. It is the source's one
   * route (`<source>/forward` on /metrics, in alerts and on /admin/routes): a route forward's
   * `headers`, rate limit, concurrency cap, circuit breaker and 410 Gone handling apply to it.
   */
  type: z.literal('forward'),
  ...routeForwardSchema.shape,
})

export const handlerConfigSchema = z.discriminatedUnion('type', [forwardHandlerSchema])
export type HandlerConfig = z.infer<typeof handlerConfigSchema>

const sourceSchema = z.object({
  /** The source's name: its webhooks arrive at `/webhooks/<id>`. */
  id: z.string().regex(SOURCE_ID, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
  /** How deliveries are verified: the provider's signature scheme and its secrets (`env:NAME` reads a variable). */
  verify: verifyConfigSchema,
  /** Absent when the handler is registered in code (`handlers: { [id]: fn }`). */
  handler: handlerConfigSchema.optional(),
  /**
   * Instead of one handler: each route whose filter matches gets the event, as its own operation
   * (see src/delivery/fan-out.ts). The event is DONE when every matched route is.
   */
  routes: routesSchema.optional(),
  /**
   * Events whose body has the same value at this JSON pointer are processed one at a time, in the
   * order they were received; a failing one holds back only the events with its key.
   */
  orderingKey: orderingKeySchema.optional(),
  /** This source's largest body (413 above it); unset, `server.bodyLimitBytes`. */
  bodyLimitBytes: z
    .number()
    .int()
    .min(1)
    .max(64 * 1024 * 1024)
    .optional(),
  /**
   * DONE events older than this are deleted (whole periods once every source's has passed). Dedup
   * lasts `retention.dedupWindowDays`, at least this: a provider retry arriving later is accepted as
   * new, so keep both longer than the provider retries.
   */
  retentionDays: z.number().int().min(1).max(3650).default(DEFAULT_RETENTION_DAYS),
  /**
   * Also answer `duplicate` to a delivery whose body equals an earlier event's body under another id,
   * within the dedup window (retention.dedupWindowDays). Default: on where the signature does not
   * cover the event id (github, shopify, hmac with an unsigned id header), off elsewhere.
   */
  dedupOnBody: z.boolean().optional(),
  /**
   * What identifies an event when the provider's event id alone does not: JSON pointers and headers,
   * optionally scoped by event type, under a version the ledger records (docs/providers.md).
   */
  dedupKey: dedupKeySchema.optional(),
  /**
   * Which of this source's events settle an outbound operation whose outcome is unknown (a provider's
   * `payment_intent.succeeded` carrying the operation key in its metadata). See docs/closing-the-loop.md.
   */
  evidence: evidenceRulesSchema.optional(),
  /** Fetch back what the provider sent while this endpoint could not take it (docs/backfill.md). */
  backfill: backfillConfigSchema.optional(),
})

export const checkedSourceSchema = sourceSchema.superRefine((source, context) => {
  if (source.backfill === undefined) return
  for (const [field, message] of backfillProblems(source.verify.scheme, source.backfill)) {
    context.addIssue({ code: 'custom', message, path: field === null ? ['backfill'] : ['backfill', field] })
  }
})

export type SourceConfig = z.infer<typeof sourceSchema>
