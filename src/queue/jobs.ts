import { z } from 'zod'
import type { JobDefaults, JobToAdd } from './backend.js'

/**
 * The job catalog. A job carries only the ledger row's id: job data sits in Redis in clear text, and
 * the row (raw body, headers) stays in Postgres, the source of truth.
 */
export const INBOUND_QUEUE = 'inbound-events'
export const PROCESS_EVENT = 'process-event'

export const processEventData = z.object({ eventRowId: z.uuid() })
export type ProcessEventData = z.infer<typeof processEventData>

/**
 * One live job per row: BullMQ ignores an add whose id exists, so the api, the relay and replays can
 * all enqueue the same row safely. `evt-<uuid>` has no ':' and is never all digits (both rejected).
 */
export function processEventJobId(eventRowId: string): string {
  return `evt-${eventRowId}`
}

/** The one way to build a row's job, so every producer derives the same id. */
export function processEventJob(eventRowId: string, delayMs?: number): JobToAdd<ProcessEventData> {
  return {
    name: PROCESS_EVENT,
    data: { eventRowId },
    opts: { jobId: processEventJobId(eventRowId), ...(delayMs === undefined ? {} : { delay: delayMs }) },
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
