import { z } from 'zod'
import { backpressureSchema } from './backpressure.js'

/**
 * The sections that size and time this process: its HTTP server, the worker, the relay, retention,
 * delivery rechecks, the PostgreSQL pool and the queues. Each defaults in full (`{}`).
 */

const statementTimeout = (defaultMs: number) => z.number().int().min(100).max(3_600_000).default(defaultMs)

export const serverSchema = z
  .object({
    /** The largest webhook body any source takes (413 above it). */
    bodyLimitBytes: z
      .number()
      .int()
      .min(1)
      .max(64 * 1024 * 1024)
      .default(1024 * 1024),
    /** The largest body `/v1/operations` reads: an agent's args are small, a 60 MB one is an attack. */
    operationsBodyLimitBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 * 1024 * 1024)
      .default(1024 * 1024),
    /** A client still sending its headers after this long is answered 408 and cut off (slowloris). */
    headersTimeoutMs: z.number().int().min(100).max(600_000).default(20_000),
    /** A client still sending its request (headers and body) after this long is answered 408 and cut off. */
    requestTimeoutMs: z.number().int().min(100).max(3_600_000).default(30_000),
    /**
     * An idle keep-alive connection is closed after this long. Above the usual 60 s idle timeout of
     * load balancers, so the balancer, not this server, closes first and never reuses a socket that
     * is being closed under it (a reset for the next request).
     */
    keepAliveTimeoutMs: z.number().int().min(1000).max(600_000).default(65_000),
    /** When the ledger cannot keep up: 429 with Retry-After for new deliveries and agents' claims. */
    backpressure: backpressureSchema,
  })
  // Node refuses to start a server whose headers timeout exceeds its request timeout.
  .refine((server) => server.headersTimeoutMs <= server.requestTimeoutMs, {
    message: 'headersTimeoutMs must not exceed requestTimeoutMs',
    path: ['headersTimeoutMs'],
  })
  .prefault({})

export const workerSchema = z
  .object({
    /** Handlers and forwards running at once in this process. */
    concurrency: z.number().int().min(1).max(256).default(8),
    /** Attempts of an event (the first included) before it is FAILED. */
    maxAttempts: z.number().int().min(1).max(100).default(8),
    /** The wait after an event's first failed attempt; it doubles after each further one. */
    backoffBaseMs: z.number().int().min(1).default(1000),
    /** The longest wait between two attempts of an event. */
    backoffMaxMs: z
      .number()
      .int()
      .min(1)
      .default(60 * 60 * 1000),
    /** An attempt that runs longer is aborted and its transaction rolled back. */
    handlerTimeoutMs: z.number().int().min(100).default(30_000),
    /** How long a crashed worker's row stays locked out before another worker takes it over. */
    leaseMs: z.number().int().min(1000).default(60_000),
    /** How often BullMQ looks for jobs whose worker died (and hands them to another). */
    stalledIntervalMs: z.number().int().min(500).default(30_000),
  })
  .refine((worker) => worker.leaseMs > worker.handlerTimeoutMs, {
    message: 'leaseMs must be longer than handlerTimeoutMs',
    path: ['leaseMs'],
  })
  .prefault({})

export const relaySchema = z
  .object({
    /** How often the relay looks for committed events that have no job. */
    intervalMs: z.number().int().min(50).default(1000),
    /** A committed row with no job this long after it arrived is handed to the queue by the relay. */
    graceMs: z.number().int().min(0).default(2000),
    /** A row whose job has been silent this long is checked against Redis and re-enqueued if lost. */
    orphanAfterMs: z.number().int().min(1000).default(60_000),
  })
  .prefault({})

export const retentionSchema = z
  .object({
    /** How often the worker deletes expired DONE events. */
    intervalMs: z
      .number()
      .int()
      .min(1000)
      .default(60 * 60 * 1000),
    /** Rows per DELETE, so a large backlog never holds long locks. */
    batchSize: z.number().int().min(1).max(100_000).default(1000),
    /**
     * Settled outbound operations (completed, compensated, exhausted, failed, abandoned) are
     * deleted this many days after their last change, with their attempts, approvals, audit
     * entries and settled evidence; open ones never are. Kept longer than `dedupWindowDays`, a
     * route's operation still stops a provider's retry later than that window from being sent
     * again (a source's own forward, which has no operation, relies on the window alone).
     */
    operationDays: z.number().int().min(1).max(3650).default(90),
    /**
     * The inbound ledger is partitioned by the time of each claim: a partition per UTC day, or per
     * week (from Monday). Retention drops a whole period once every source's `retentionDays` has
     * passed and none of its events is unfinished. A change applies to the periods made after it.
     */
    partitionPeriod: z.enum(['day', 'week']).default('day'),
    /**
     * A delivery of an event id claimed this many days ago or less is a duplicate, even after
     * retention dropped the first copy's period. At least the longest `retentionDays` of any source
     * (checked at start-up). Keys are kept in generations of this length and dropped whole, so one
     * stays between one and two windows.
     */
    dedupWindowDays: z.number().int().min(1).max(3650).default(30),
  })
  .prefault({})

export const deliverySchema = z
  .object({
    /**
     * How often a delivery to a route disabled by a 410 Gone looks whether it was re-enabled.
     * Re-enabling a route resumes its paused deliveries at once; this bounds the wait of one left to
     * its recheck (leased at that very moment).
     */
    pausedRecheckMs: z.number().int().min(100).max(3_600_000).default(30_000),
    /** How often an event held back by its ordering key looks whether the one before it is done. */
    orderingRecheckMs: z.number().int().min(50).max(600_000).default(1000),
  })
  .prefault({})

export const databaseSchema = z
  .object({
    /**
     * Connections this process may open to PostgreSQL. Unset: 10 for --role api, worker.concurrency
     * + 4 for --role worker, worker.concurrency + 8 for --role all (see ledgerPoolSize in src/db/client.ts).
     */
    poolSize: z.number().int().min(2).max(1000).optional(),
    /**
     * How long a statement may wait for its answer, per part of the process; past it the statement
     * fails (a request answers 503) and its connection is dropped. A silent network gives no error
     * of its own, so this is what notices it (see openLedger in src/db/client.ts). The server's
     * `statement_timeout` follows it: once per connection, or behind PgBouncer in transaction mode
     * (`?pgbouncer=true` on DATABASE_URL) at the start of each transaction.
     */
    statementTimeoutMs: z
      .object({
        /** The HTTP routes: a provider waits for the answer (many give up after 10-30 s). */
        request: statementTimeout(5000),
        /** Jobs: leases, DONE marks, the outbound ledger, a code handler's transaction statements. */
        worker: statementTimeout(15_000),
        relay: statementTimeout(10_000),
        /** Deletes in batches of `retention.batchSize`. */
        retention: statementTimeout(60_000),
        reconciler: statementTimeout(15_000),
        /** The alert conditions count over the ledger's tables. */
        alerts: statementTimeout(30_000),
        backfill: statementTimeout(15_000),
      })
      .prefault({}),
  })
  .prefault({})

export const queueSchema = z
  .object({
    /**
     * Defaults to one derived from the database's deployment id, so deployments never share jobs. On a
     * Redis Cluster it is used as a hash tag, `{prefix}`.
     */
    prefix: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/)
      .optional(),
  })
  .prefault({})
