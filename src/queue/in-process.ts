import { backoffDelay } from '../backoff.js'
import type {
  AddOptions,
  InProcessBackend,
  JobDefaults,
  JobQueue,
  JobResult,
  JobState,
  ProcessOptions,
  Processor,
  QueuedJob,
} from './backend.js'

/**
 * Jobs in this process's memory, for one process without Redis. Losing them is safe by design: the
 * ledger rows are the truth, and after a restart the relay finds every PENDING or PROCESSING row
 * again and adds its job (see `resumeUnfinished` in relay.ts).
 *
 * Finished jobs are dropped at once, unlike BullMQ's kept history. A second add of a finished job's
 * id therefore runs it again, which costs one lease query: the row is DONE (or FAILED) and nothing
 * runs. Keeping them would only mirror a history that nothing here can show, and would let memory
 * grow with traffic instead of with the work still owed.
 */
export function createInProcessBackend(): InProcessBackend {
  const lanes = new Map<string, Lane>()
  const lane = (name: string) => {
    let found = lanes.get(name)
    if (found === undefined) {
      found = new Lane(name)
      lanes.set(name, found)
    }
    return found
  }
  return {
    kind: 'in-process',
    queue<D>(name: string, defaults: JobDefaults): JobQueue<D> {
      const target = lane(name)
      target.retry = retryPolicy(name, defaults)
      return {
        add: async (_name, data, opts) => target.add(data, opts),
        addBulk: async (jobs) => {
          for (const job of jobs) target.add(job.data, job.opts)
        },
        getJobState: async (jobId) => target.state(jobId),
        remove: async (jobId) => target.remove(jobId),
        getJobCounts: async (...states) => target.counts(states),
        close: async () => target.close(),
      }
    },
    process<D>(name: string, processor: Processor<D>, options: ProcessOptions) {
      // Jobs reach a lane only through a JobQueue<D> of the same name (BullMQ's Worker<D> assumes as
      // much of what it reads from Redis); processors still parse their data.
      return lane(name).attach((job) => processor({ id: job.id, data: job.data as D }), options)
    },
    async close() {},
  }
}

type RunnableState = Exclude<JobState, 'completed' | 'failed' | 'unknown'>

interface Entry {
  id: string
  data: unknown
  state: RunnableState
  attemptsMade: number
  timer?: NodeJS.Timeout
}

interface RetryPolicy {
  attempts: number
  delayMs: (attemptsMade: number) => number
}

interface Runner {
  processor: Processor<unknown>
  concurrency: number
  onFailed: ProcessOptions['onFailed']
  running: Set<Promise<void>>
  closed: boolean
}

class Lane {
  /** Set by the queue's defaults; a lane made first by its processor runs each job once. */
  retry: RetryPolicy = { attempts: 1, delayMs: () => 0 }
  private readonly jobs = new Map<string, Entry>()
  /** Ids of the waiting jobs, oldest first. */
  private readonly ready: string[] = []
  private runner: Runner | undefined
  private closed = false
  private pumpScheduled = false

  constructor(readonly name: string) {}

  /** Job names only label jobs in BullMQ's history; one processor takes every job of a queue. */
  add(data: unknown, opts: AddOptions) {
    if (this.closed) throw new Error(`the in-process queue '${this.name}' is closed`)
    // As in BullMQ: a job id that exists in any state makes the add a no-op.
    if (this.jobs.has(opts.jobId)) return
    const entry: Entry = { id: opts.jobId, data, state: 'waiting', attemptsMade: 0 }
    this.jobs.set(entry.id, entry)
    this.schedule(entry, opts.delay ?? 0)
  }

  state(jobId: string): JobState {
    return this.jobs.get(jobId)?.state ?? 'unknown'
  }

  /** A running job cannot be removed (BullMQ refuses a locked one too). */
  remove(jobId: string): number {
    const entry = this.jobs.get(jobId)
    if (entry === undefined || entry.state === 'active') return 0
    clearTimeout(entry.timer)
    this.jobs.delete(jobId)
    const at = this.ready.indexOf(jobId)
    if (at !== -1) this.ready.splice(at, 1)
    return 1
  }

  counts(states: readonly Exclude<JobState, 'unknown'>[]): Record<string, number> {
    const counts: Record<string, number> = Object.fromEntries(states.map((state) => [state, 0]))
    for (const entry of this.jobs.values()) {
      const current = counts[entry.state]
      if (current !== undefined) counts[entry.state] = current + 1
    }
    return counts
  }

  attach(processor: Processor<unknown>, options: ProcessOptions) {
    if (this.runner !== undefined && !this.runner.closed) {
      throw new Error(`the in-process queue '${this.name}' already has a processor`)
    }
    const runner: Runner = {
      processor,
      concurrency: options.concurrency,
      onFailed: options.onFailed,
      running: new Set(),
      closed: false,
    }
    this.runner = runner
    this.pumpSoon()
    return {
      close: async (force?: boolean) => {
        runner.closed = true
        // As BullMQ's worker.close(): wait for the running jobs, unless forced.
        if (force !== true) await Promise.allSettled(runner.running)
      },
    }
  }

  /** Forgets every job: nothing runs from this queue any more. */
  close() {
    this.closed = true
    for (const entry of this.jobs.values()) clearTimeout(entry.timer)
    this.jobs.clear()
    this.ready.length = 0
  }

  private schedule(entry: Entry, delayMs: number) {
    if (this.closed) return
    if (delayMs > 0) {
      entry.state = 'delayed'
      // Unref'd: a delayed job must not keep a stopping process alive; the ledger still has its row.
      entry.timer = setTimeout(() => {
        entry.timer = undefined
        this.makeReady(entry)
      }, delayMs).unref()
      return
    }
    this.makeReady(entry)
  }

  private makeReady(entry: Entry) {
    entry.state = 'waiting'
    this.ready.push(entry.id)
    this.pumpSoon()
  }

  /** Starts jobs on a later turn, so an add returns before its job runs, as with Redis in between. */
  private pumpSoon() {
    if (this.pumpScheduled) return
    this.pumpScheduled = true
    setImmediate(() => {
      this.pumpScheduled = false
      this.pump()
    })
  }

  private pump() {
    const runner = this.runner
    if (runner === undefined || runner.closed) return
    while (runner.running.size < runner.concurrency) {
      const id = this.ready.shift()
      if (id === undefined) return
      const entry = this.jobs.get(id)
      if (entry !== undefined) this.start(entry, runner)
    }
  }

  private start(entry: Entry, runner: Runner) {
    entry.state = 'active'
    const job: QueuedJob<unknown> = { id: entry.id, data: entry.data }
    const run = this.settle(entry, runner, job).finally(() => {
      runner.running.delete(run)
      this.pumpSoon()
    })
    runner.running.add(run)
  }

  private async settle(entry: Entry, runner: Runner, job: QueuedJob<unknown>) {
    let result: JobResult
    try {
      result = await runner.processor(job)
    } catch (thrown) {
      const error = thrown instanceof Error ? thrown : new Error(String(thrown))
      entry.attemptsMade += 1
      runner.onFailed?.(entry.id, error)
      if (entry.attemptsMade < this.retry.attempts) {
        this.schedule(entry, this.retry.delayMs(entry.attemptsMade))
      } else {
        // Given up, as BullMQ fails a job: the relay re-adds its row if the row still needs work.
        this.jobs.delete(entry.id)
      }
      return
    }
    if (result.kind === 'delayed') this.schedule(entry, result.until - Date.now())
    else this.jobs.delete(entry.id)
  }
}

/**
 * The same retries BullMQ would make from these options: `attempts` runs in all (default 1), and its
 * built-in backoffs: a number is a fixed delay, exponential waits delay · 2^(n-1).
 */
function retryPolicy(queueName: string, defaults: JobDefaults): RetryPolicy {
  const attempts = defaults.attempts ?? 1
  const { backoff } = defaults
  if (backoff === undefined) return { attempts, delayMs: () => 0 }
  if (typeof backoff === 'number') return { attempts, delayMs: () => backoff }
  const delay = backoff.delay ?? 0
  switch (backoff.type) {
    case 'fixed':
      return { attempts, delayMs: () => delay }
    case 'exponential':
      return {
        attempts,
        delayMs: (attemptsMade) =>
          Math.round(
            backoffDelay({ baseDelayMs: delay, maxDelayMs: Number.POSITIVE_INFINITY }, attemptsMade),
          ),
      }
    default:
      throw new TypeError(`queue '${queueName}': the in-process queue has no '${backoff.type}' backoff`)
  }
}
