import type { JobsOptions, Queue } from 'bullmq'
import type { RedisCondition } from './redis-health.js'

/**
 * The queue seam: the subset of BullMQ this code uses, implemented by BullMQ itself (`bullmq.ts`)
 * and by an in-process queue (`in-process.ts`) for a single process without Redis. Jobs carry row
 * ids only and the rows decide what runs, so either backend may lose its jobs: the relay refills it.
 */

/** A job's state as BullMQ names it; `unknown` when no job has that id (never added, or removed). */
export type JobState = 'waiting' | 'active' | 'delayed' | 'completed' | 'failed' | 'unknown'

export interface AddOptions {
  /** Derived from the ledger row: an add whose id exists, in any state, is ignored. */
  jobId: string
  /** Milliseconds before the job may run. */
  delay?: number
}

export interface JobToAdd<D> {
  name: string
  data: D
  opts: AddOptions
}

/** Per queue: retries of a job whose processor throws (an infrastructure error), and BullMQ's history. */
export type JobDefaults = Pick<JobsOptions, 'attempts' | 'backoff' | 'removeOnComplete' | 'removeOnFail'>

export interface JobQueue<D> {
  add(name: string, data: D, opts: AddOptions): Promise<unknown>
  addBulk(jobs: readonly JobToAdd<D>[]): Promise<unknown>
  getJobState(jobId: string): Promise<JobState>
  /** Removes a job that is not running; resolves to the number removed (0 or 1). */
  remove(jobId: string): Promise<number>
  getJobCounts(...states: Exclude<JobState, 'unknown'>[]): Promise<Record<string, number>>
  close(): Promise<void>
}

export interface QueuedJob<D> {
  id: string
  data: D
}

/**
 * What a processor tells its queue. `delayed` is "run this same job again at `until`" (a lease held
 * elsewhere, a handler's backoff): it does not count as a failed attempt. A throw does, and is retried
 * with the queue's backoff until its attempts are used up.
 */
export type JobResult = { kind: 'done'; result?: unknown } | { kind: 'delayed'; until: number }

export type Processor<D> = (job: QueuedJob<D>) => Promise<JobResult>

export interface ProcessOptions {
  concurrency: number
  /** BullMQ's stalled-job check (a worker that died holding a job). In-process jobs die with the process. */
  stalled?: { intervalMs: number; lockMs: number; maxCount: number }
  /** The connection failed (BullMQ only; the in-process queue has none). */
  onError?: (error: Error) => void
  /** One run of a job threw. */
  onFailed?: (jobId: string | undefined, error: Error) => void
}

export interface JobProcessor {
  /** Stops taking jobs and waits for the running ones; `force` does not wait. */
  close(force?: boolean): Promise<void>
}

interface BackendBase {
  queue<D>(name: string, defaults: JobDefaults): JobQueue<D>
  process<D>(name: string, processor: Processor<D>, options: ProcessOptions): JobProcessor
  /** Closes connections; call after every processor and queue is closed. */
  close(): Promise<void>
}

export interface BullmqBackend extends BackendBase {
  kind: 'bullmq'
  /** Readiness: Redis answers, with its eviction policy and whether it takes writes (redis-health.ts). */
  inspect(): Promise<RedisCondition>
  /**
   * True when Redis does not hold the marker this deployment keeps under its prefix: Redis was
   * flushed, restarted without persistence, failed over to an empty replica or never had it (the
   * first start), so the queue's jobs may be gone with it.
   */
  storeEmptied(): Promise<boolean>
  /** Sets the marker again, once every unfinished row is back in the queue. */
  markStore(): Promise<void>
  /** The connection that adds jobs is up now (it notices a Redis gone at once, not at the next check). */
  connected(): boolean
  /** The BullMQ queues made so far, for a dashboard that reads Redis directly. */
  queues(): readonly Queue[]
}

export interface InProcessBackend extends BackendBase {
  kind: 'in-process'
}

export type QueueBackend = BullmqBackend | InProcessBackend

export const done: JobResult = { kind: 'done' }

export function runAgainAt(until: number): JobResult {
  return { kind: 'delayed', until }
}
