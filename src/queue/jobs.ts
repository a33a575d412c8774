import { randomUUID } from 'node:crypto'
import { z } from 'zod'
import type { JobDefaults, JobToAdd } from './backend.js'
import { isClusterUrl } from './connections.js'

/**
 * The job catalog. A job carries only ledger row ids: job data sits in Redis in clear text, and the
 * rows (raw body, headers) stay in Postgres, the source of truth.
 */
export const INBOUND_QUEUE = 'inbound-events'
export const PROCESS_EVENT = 'process-event'

/**
 * Rows one job may carry. The rows a receive batch committed together travel as one job, so the queue
 * costs one add, one fetch and one completion per batch instead of per event; the rows still decide
 * what runs (each is leased on its own), so a job carrying a finished or foreign-held row is harmless.
 */
export const MAX_ROWS_PER_JOB = 64

export const processEventData = z.union([
  z.object({ eventRowIds: z.array(z.uuid()).min(1).max(MAX_ROWS_PER_JOB) }),
  // A job added by an earlier version names one row; it still runs after an upgrade.
  z.object({ eventRowId: z.uuid() }).transform(({ eventRowId }) => ({ eventRowIds: [eventRowId] })),
])
export type ProcessEventData = z.output<typeof processEventData>

/**
 * A row's own job: one live job per row, since BullMQ ignores an add whose id exists, so replays and
 * the relay's orphan recovery can enqueue the same row safely. `evt-<uuid>` has no ':' and is never
 * all digits (both rejected).
 */
export function processEventJobId(eventRowId: string): string {
  return `evt-${eventRowId}`
}

/** The one way to build a row's own job, so every producer derives the same id. */
export function processEventJob(eventRowId: string, delayMs?: number): JobToAdd<ProcessEventData> {
  return {
    name: PROCESS_EVENT,
    data: { eventRowIds: [eventRowId] },
    opts: { jobId: processEventJobId(eventRowId), ...(delayMs === undefined ? {} : { delay: delayMs }) },
  }
}

/**
 * Jobs for rows committed together: a row alone gets its own job; more go up to `MAX_ROWS_PER_JOB`
 * a job under a fresh id. No id is derived from the rows there, since a batch is never added twice
 * on purpose and a second job for a row only finds it finished or leased.
 */
export function processEventsJobs(eventRowIds: readonly string[]): JobToAdd<ProcessEventData>[] {
  const [only] = eventRowIds
  if (eventRowIds.length === 1 && only !== undefined) return [processEventJob(only)]
  const jobs: JobToAdd<ProcessEventData>[] = []
  for (let start = 0; start < eventRowIds.length; start += MAX_ROWS_PER_JOB) {
    jobs.push({
      name: PROCESS_EVENT,
      data: { eventRowIds: eventRowIds.slice(start, start + MAX_ROWS_PER_JOB) },
      opts: { jobId: `evts-${randomUUID()}` },
    })
  }
  return jobs
}

/**
 * A row of a batch job that must run again later (backoff, a lease held elsewhere): a job of its own
 * with the delay. Its id is fresh, because the row's own job id may still name a finished job kept in
 * BullMQ's history, and an add under that id would be ignored.
 */
export function processEventLaterJob(eventRowId: string, delayMs: number): JobToAdd<ProcessEventData> {
  return {
    name: PROCESS_EVENT,
    data: { eventRowIds: [eventRowId] },
    opts: { jobId: `${processEventJobId(eventRowId)}-${randomUUID()}`, delay: Math.max(0, delayMs) },
  }
}

export const processEventJobOptions: JobDefaults = {
  // These attempts cover infrastructure errors (Postgres down while taking the lease); handler
  // attempts and their backoff are counted on the row, where they survive a lost Redis.
  attempts: 5,
  backoff: { type: 'exponential', delay: 1000 },
  removeOnComplete: { age: 24 * 3600, count: 10_000 },
  removeOnFail: { age: 7 * 24 * 3600 },
}

/** The queue prefix of a deployment: its own, so deployments sharing one Redis never see each other's jobs. */
export function deploymentQueuePrefix(deploymentId: string): string {
  return `hookledger-${deploymentId}`
}

/**
 * The prefix every Redis key of the deployment starts with: `queue.prefix`, or the deployment's own.
 * On a Redis Cluster it is a hash tag (`{hookledger-…}`): BullMQ's scripts touch several keys of a
 * queue at once, which a cluster allows only within one hash slot, and the tag puts every key
 * hookledger keeps (jobs, circuits, rate windows, probes) in the slot of the prefix. A single server
 * keeps the plain prefix: changing it would orphan the jobs a running deployment already holds.
 */
export function queuePrefixOf(options: {
  configured: string | undefined
  deploymentId: string
  redisUrl: string | undefined
}): string {
  const prefix = options.configured ?? deploymentQueuePrefix(options.deploymentId)
  return options.redisUrl !== undefined && isClusterUrl(options.redisUrl) ? `{${prefix}}` : prefix
}

/** The outbound reconciler's queue: one job per operation and attempt that needs reconciling. */
export const RECONCILE_QUEUE = 'outbound-reconcile'
export const RECONCILE_OPERATION = 'reconcile-operation'
export const reconcileJobData = z.object({ operationId: z.uuid() })
export type ReconcileJobData = z.infer<typeof reconcileJobData>

/** `rec-<uuid>-<n>` has no ':' and is never all digits. */
export function reconcileJobId(operationId: string, attempt: number): string {
  return `rec-${operationId}-${attempt}`
}

export const reconcileJobOptions: JobDefaults = {
  attempts: 5,
  backoff: { type: 'exponential', delay: 1000 },
  // The row is the truth: a finished job may go, so the sweep can add the same id again.
  removeOnComplete: true,
  removeOnFail: true,
}
