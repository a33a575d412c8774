import { z } from 'zod'

/**
 * `server.backpressure`: the bounds past which new deliveries and agents' claims are answered 429
 * with `Retry-After` (src/inbound/backpressure.ts keeps the counts and decides).
 */
export const backpressureSchema = z
  .object({
    /**
     * Unfinished events (PENDING or PROCESSING) at which new deliveries and agents' claims are
     * refused. Null: no bound. Each api process counts the ledger every `checkIntervalMs` and adds
     * what it accepted since, so one process stops exactly at the bound and several within one
     * interval's intake of it.
     */
    maxBacklog: z.number().int().min(1).nullable().default(null),
    /** Claims waiting in this process's claim batcher (gathered or in a statement) at which it refuses. */
    maxClaimQueue: z.number().int().min(1).default(5000),
    /**
     * Refuse while the 99th percentile of the claim statement's time over the last `windowMs`
     * exceeds this (PostgreSQL answering slowly). Null: not watched.
     */
    maxClaimP99Ms: z.number().int().min(1).nullable().default(null),
    windowMs: z.number().int().min(1000).max(600_000).default(10_000),
    /** How often each api process counts the backlog. */
    checkIntervalMs: z.number().int().min(100).max(600_000).default(1000),
    /** The `Retry-After` of a refusal, in seconds. */
    retryAfterSeconds: z.number().int().min(1).max(3600).default(30),
  })
  .strict()
  .prefault({})

export type BackpressureSettings = z.infer<typeof backpressureSchema>
