import { z } from 'zod'

/** The `outbound` section of the config file: the ledger's retry, lease and reconciliation timings. */
export const outboundSettingsSchema = z
  .object({
    /** How long a caller owns an operation; an expired lease is the crash window of the decision table. */
    leaseMs: z.number().int().min(500).default(60_000),
    /** Bounded backoff per round: attempts (the first included), doubling base delay, cap. */
    maxAttempts: z.number().int().min(1).max(20).default(4),
    backoffBaseMs: z.number().int().min(1).default(500),
    backoffMaxMs: z.number().int().min(1).default(10_000),
    /** Sleep before asking the external system whether an unknown outcome happened. */
    reconcileDelayMs: z.number().int().min(0).default(30_000),
    /** The time limit of one reconcile call. */
    reconcileTimeoutMs: z.number().int().min(100).default(30_000),
    /** How often the reconciler looks for due rows whose job was lost, and for abandoned leases. */
    sweepIntervalMs: z.number().int().min(100).default(5_000),
    /**
     * Hosts an `httpTool` may reach although they resolve to loopback, private, link-local or
     * metadata addresses. URLs written in the config (a `forward` destination) are trusted anyway.
     */
    allowHosts: z.array(z.string().min(1)).default([]),
    /**
     * Retry settings per tool name, for tools this server does not define in code (those an agent
     * calls over HTTP). A tool's own `retry` comes first, then this entry, then the values above.
     * The tools named here also get a `tool` label of their own on /metrics (others count as `other`).
     */
    tools: z
      .record(
        z.string().min(1),
        z
          .object({
            maxAttempts: z.number().int().min(1).max(20),
            backoffBaseMs: z.number().int().min(1),
            backoffMaxMs: z.number().int().min(1),
          })
          .partial()
          .strict(),
      )
      .default({}),
  })
  .refine((s) => s.leaseMs > s.backoffMaxMs, {
    message: 'leaseMs must be longer than backoffMaxMs',
    path: ['leaseMs'],
  })
  .prefault({})

export type OutboundSettings = z.infer<typeof outboundSettingsSchema>

export const defaultOutboundSettings: OutboundSettings = outboundSettingsSchema.parse(undefined)
