import { describe, expect, it } from 'vitest'
import { done, type JobResult, type QueuedJob, runAgainAt } from '../../src/queue/backend.js'
import { createInProcessBackend } from '../../src/queue/in-process.js'
import { gate } from '../support/gate.js'

interface Data {
  n: number
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A backend with one queue and a processor that records each run. */
function setup(
  run: (job: QueuedJob<Data>, runs: number) => Promise<JobResult> = async () => done,
  options: { concurrency?: number; attempts?: number; backoffMs?: number } = {},
) {
  const backend = createInProcessBackend()
  const queue = backend.queue<Data>('q', {
    attempts: options.attempts ?? 1,
    backoff: { type: 'exponential', delay: options.backoffMs ?? 10 },
  })
  const runs: Array<{ id: string; n: number; at: number }> = []
  const failures: string[] = []
  const processor = backend.process<Data>(
    'q',
    async (job) => {
      runs.push({ id: job.id, n: job.data.n, at: Date.now() })
      return run(job, runs.filter((r) => r.id === job.id).length)
    },
    {
      concurrency: options.concurrency ?? 2,
      onFailed: (jobId, error) => failures.push(`${jobId}: ${error.message}`),
    },
  )
  return { backend, queue, processor, runs, failures }
}

describe('in-process queue', () => {
  it('ignores an add whose job id exists, in one batch or across adds', async () => {
    const { queue, runs } = setup()
    await queue.addBulk([
      { name: 'x', data: { n: 1 }, opts: { jobId: 'a' } },
      { name: 'x', data: { n: 2 }, opts: { jobId: 'a' } },
      { name: 'x', data: { n: 3 }, opts: { jobId: 'b' } },
    ])
    await queue.add('x', { n: 4 }, { jobId: 'b' })
    await expect.poll(() => runs.length).toBe(2)
    await sleep(50)
    // The first add's data wins, as in BullMQ (Redis keeps the original).
    expect(runs.map((r) => [r.id, r.n])).toEqual([
      ['a', 1],
      ['b', 3],
    ])
  })

  it('drops a finished job, so the same id can be added and run again', async () => {
    const { queue, runs } = setup()
    await queue.add('x', { n: 1 }, { jobId: 'a' })
    await expect.poll(() => queue.getJobState('a')).toBe('unknown')
    await queue.add('x', { n: 2 }, { jobId: 'a' })
    await expect.poll(() => runs.length).toBe(2)
  })

  it('runs a job with a delay no earlier than asked, and reports it delayed meanwhile', async () => {
    const { queue, runs } = setup()
    const added = Date.now()
    await queue.add('x', { n: 1 }, { jobId: 'late', delay: 200 })
    expect(await queue.getJobState('late')).toBe('delayed')
    expect(await queue.getJobCounts('waiting', 'active', 'delayed')).toEqual({
      waiting: 0,
      active: 0,
      delayed: 1,
    })
    await expect.poll(() => runs.length).toBe(1)
    expect((runs[0]?.at ?? 0) - added).toBeGreaterThanOrEqual(195)
  })

  it('runs a job again at the time its processor asks for, without counting a failed attempt', async () => {
    const { queue, runs, failures } = setup(async (_job, count) =>
      count < 3 ? runAgainAt(Date.now() + 60) : done,
    )
    await queue.add('x', { n: 1 }, { jobId: 'again' })
    await expect.poll(() => runs.length).toBe(3)
    await expect.poll(() => queue.getJobState('again')).toBe('unknown')
    expect((runs[1]?.at ?? 0) - (runs[0]?.at ?? 0)).toBeGreaterThanOrEqual(55)
    expect(failures).toEqual([])
  })

  it('never runs more jobs at once than its concurrency', async () => {
    const release = gate()
    let running = 0
    let most = 0
    const { queue, runs } = setup(
      async () => {
        running += 1
        most = Math.max(most, running)
        await release.opened
        running -= 1
        return done
      },
      { concurrency: 3 },
    )
    await queue.addBulk(
      Array.from({ length: 10 }, (_, n) => ({ name: 'x', data: { n }, opts: { jobId: `c${n}` } })),
    )
    await expect.poll(() => running).toBe(3)
    await sleep(50)
    expect(most).toBe(3)
    expect(await queue.getJobCounts('waiting', 'active')).toEqual({ waiting: 7, active: 3 })
    release.open()
    await expect.poll(() => runs.length).toBe(10)
    expect(most).toBe(3)
    // Oldest first.
    expect(runs.map((r) => r.n)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
  })

  it('removes a waiting or delayed job before it runs, but not a running one', async () => {
    const release = gate()
    const { queue, runs } = setup(
      async () => {
        await release.opened
        return done
      },
      { concurrency: 1 },
    )
    await queue.add('x', { n: 1 }, { jobId: 'busy' })
    await queue.add('x', { n: 2 }, { jobId: 'queued' })
    await queue.add('x', { n: 3 }, { jobId: 'later', delay: 100 })
    await expect.poll(() => queue.getJobState('busy')).toBe('active')
    expect(await queue.getJobState('queued')).toBe('waiting')
    expect(await queue.remove('queued')).toBe(1)
    expect(await queue.remove('later')).toBe(1)
    expect(await queue.remove('busy')).toBe(0)
    expect(await queue.remove('never-added')).toBe(0)
    expect(await queue.getJobState('queued')).toBe('unknown')
    expect(await queue.getJobState('later')).toBe('unknown')
    release.open()
    await sleep(200)
    expect(runs.map((r) => r.id)).toEqual(['busy'])
  })

  it('retries a throwing processor with exponential backoff, then gives the job up', async () => {
    const { queue, runs, failures } = setup(
      async () => {
        throw new Error('database down')
      },
      { attempts: 3, backoffMs: 40 },
    )
    await queue.add('x', { n: 1 }, { jobId: 'infra' })
    await expect.poll(() => failures.length).toBe(3)
    await sleep(100)
    expect(runs).toHaveLength(3)
    expect(failures).toEqual(['infra: database down', 'infra: database down', 'infra: database down'])
    expect((runs[1]?.at ?? 0) - (runs[0]?.at ?? 0)).toBeGreaterThanOrEqual(38)
    expect((runs[2]?.at ?? 0) - (runs[1]?.at ?? 0)).toBeGreaterThanOrEqual(78)
    // Given up and forgotten: the relay finds its row 'unknown' and adds it again.
    expect(await queue.getJobState('infra')).toBe('unknown')
  })

  it('recovers when a retry succeeds', async () => {
    const { queue, runs } = setup(
      async (_job, count) => {
        if (count < 3) throw new Error('not yet')
        return done
      },
      { attempts: 5, backoffMs: 5 },
    )
    await queue.add('x', { n: 1 }, { jobId: 'flaky' })
    await expect.poll(() => queue.getJobState('flaky')).toBe('unknown')
    expect(runs).toHaveLength(3)
  })

  it('close() waits for the running job and starts no other; close(true) does not wait', async () => {
    const release = gate()
    let finished = 0
    const { queue, processor, runs } = setup(
      async () => {
        await release.opened
        finished += 1
        return done
      },
      { concurrency: 1 },
    )
    await queue.add('x', { n: 1 }, { jobId: 'one' })
    await queue.add('x', { n: 2 }, { jobId: 'two' })
    await expect.poll(() => runs.length).toBe(1)
    let closed = false
    const closing = processor.close().then(() => {
      closed = true
    })
    await sleep(100)
    expect(closed).toBe(false)
    release.open()
    await closing
    expect(finished).toBe(1)
    await sleep(50)
    expect(runs.map((r) => r.id)).toEqual(['one'])

    const stuck = setup(async () => new Promise<JobResult>(() => {}))
    await stuck.queue.add('x', { n: 1 }, { jobId: 'forever' })
    await expect.poll(() => stuck.runs.length).toBe(1)
    await stuck.processor.close(true)
    await stuck.queue.close()
  })

  it('refuses adds once closed, and forgets its delayed jobs', async () => {
    const { queue, runs } = setup()
    await queue.add('x', { n: 1 }, { jobId: 'parked', delay: 50 })
    await queue.close()
    await expect(queue.add('x', { n: 2 }, { jobId: 'late' })).rejects.toThrow(/closed/)
    await sleep(120)
    expect(runs).toEqual([])
  })
})
