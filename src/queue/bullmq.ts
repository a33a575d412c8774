import { once } from 'node:events'
import { DelayedError, Queue, Worker } from 'bullmq'
import type { Logger } from '../logger.js'
import type { BullmqBackend, JobDefaults, JobQueue, ProcessOptions, Processor } from './backend.js'
import { routeBullmqWarnings } from './bullmq-warnings.js'
import { consumerConnection, producerConnection, type RedisConnection } from './connections.js'
import { inspectRedis } from './redis-health.js'

/**
 * The distributed backend: any number of api and worker processes share one Redis. One producer
 * connection serves every queue (it fails fast, see connections.ts); each processor has its own
 * blocking consumer connection, as BullMQ requires.
 */
export function createBullmqBackend(options: {
  url: string
  prefix: string
  logger: Logger
  /** Told at each attempt to make a connection again: the producer's, or a worker's (its blocking one too). */
  onReconnect?: (connection: 'producer' | 'worker') => void
}): BullmqBackend {
  const { url, prefix, onReconnect } = options
  const unrouteWarnings = routeBullmqWarnings(options.logger)
  const producer = producerConnection(url, () => onReconnect?.('producer'))
  producer.on('error', () => {}) // reported by readiness and by the enqueue that fails
  const queues: Queue[] = []
  const consumers: RedisConnection[] = []
  // Under the deployment's prefix: present while Redis still holds what this deployment wrote.
  const storeMarker = `${prefix}:hookledger:store-marker`
  return {
    kind: 'bullmq',
    queue<D>(name: string, defaults: JobDefaults) {
      const queue: PlainQueue<D> = new Queue(name, {
        connection: producer,
        prefix,
        defaultJobOptions: defaults,
      })
      queue.on('error', () => {})
      queues.push(queue)
      return bullmqJobQueue(queue)
    },
    process<D>(name: string, processor: Processor<D>, options: ProcessOptions) {
      const { concurrency, stalled, onError, onFailed } = options
      // BullMQ's blocking connection is a duplicate of this one: its options, this count included.
      const connection = consumerConnection(url, () => onReconnect?.('worker'))
      connection.on('error', () => {})
      consumers.push(connection)
      const worker = new Worker<D, unknown, string>(
        name,
        async (job, token) => {
          if (job.id === undefined) throw new Error(`BullMQ handed over a '${job.name}' job without an id`)
          const result = await processor({ id: job.id, data: job.data })
          if (result.kind === 'done') return result.result
          // BullMQ's way to run the same job later without counting an attempt.
          await job.moveToDelayed(result.until, token)
          throw new DelayedError()
        },
        {
          connection,
          prefix,
          concurrency,
          ...(stalled === undefined
            ? {}
            : {
                stalledInterval: stalled.intervalMs,
                lockDuration: stalled.lockMs,
                maxStalledCount: stalled.maxCount,
              }),
        },
      )
      // An 'error' event without a listener would crash the process.
      worker.on('error', onError ?? (() => {}))
      if (onFailed !== undefined) worker.on('failed', (job, error) => onFailed(job?.id, error))
      return { close: (force) => worker.close(force) }
    },
    // Under the deployment's prefix, so deployments sharing one Redis never write each other's key.
    async inspect() {
      // The producer queues nothing while disconnected: the check at start waits for its first
      // connection (or its first failure) instead of failing before it had a chance.
      if (['wait', 'connecting', 'connect'].includes(producer.status)) await once(producer, 'ready')
      return inspectRedis(producer, `${prefix}:hookledger:write-probe`)
    },
    async storeEmptied() {
      return (await producer.exists(storeMarker)) === 0
    },
    async markStore() {
      await producer.set(storeMarker, String(Date.now()))
    },
    connected: () => producer.status === 'ready',
    queues: () => queues,
    async close() {
      unrouteWarnings()
      producer.disconnect()
      for (const consumer of consumers) consumer.disconnect()
    },
  }
}

/** A BullMQ queue of plain data (not of Job subclasses), with any job name. */
type PlainQueue<D> = Queue<D, unknown, string, D, unknown, string>

/** A BullMQ queue seen through the seam. BullMQ's extra waiting states count as waiting here. */
export function bullmqJobQueue<D>(queue: PlainQueue<D>): JobQueue<D> {
  return {
    add: (name, data, opts) => queue.add(name, data, opts),
    addBulk: (jobs) => queue.addBulk(jobs.map(({ name, data, opts }) => ({ name, data, opts }))),
    async getJobState(jobId) {
      const state = await queue.getJobState(jobId)
      return state === 'prioritized' || state === 'waiting-children' ? 'waiting' : state
    },
    remove: (jobId) => queue.remove(jobId),
    getJobCounts: (...states) => queue.getJobCounts(...states),
    close: () => queue.close(),
  }
}
