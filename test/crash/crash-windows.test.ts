import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import { describe, expect, it } from 'vitest'
import type { FailpointName } from '../../src/failpoints.js'
import { deploymentQueuePrefix, INBOUND_QUEUE, processEventJobId } from '../../src/queue/jobs.js'
import type { Child } from '../support/child.js'
import { crashWitness, deliverOrder } from '../support/crash-ledger.js'
import { testRedisUrl } from '../support/env.js'
import { serviceHarness } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'

// Each window: the real service in a child process kills itself (SIGKILL) at a named point; the
// ledger is then checked, the service started again, and the provider's retry sent.

const harness = serviceHarness({
  folder: 'hookledger-crash-',
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
  config: {
    sources: [{ id: 'acme', verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] } }],
    worker: {
      maxAttempts: 5,
      backoffBaseMs: 50,
      handlerTimeoutMs: 1000,
      leaseMs: 2000,
      stalledIntervalMs: 1000,
    },
    relay: { intervalMs: 200, graceMs: 500, orphanAfterMs: 5000 },
  },
})

const start = (failpoint?: FailpointName, role: 'all' | 'api' | 'worker' = 'all') =>
  harness.startChild({ entry: ['test/support/crash-server.mjs'], env: { TEST_ROLE: role }, failpoint })

const { rowFor, effects, invocations } = crashWitness(harness)

async function killedBy(crashing: Child) {
  expect(await crashing.exited).toBe('SIGKILL')
}

describe('crash windows (SIGKILL at named points)', () => {
  it('before the commit: no row; the provider retry is accepted and processed once', async () => {
    const crashing = await start('receive.before_commit')
    await expect(deliverOrder(crashing.url, 'evt_crash_before_commit')).rejects.toThrow()
    await killedBy(crashing)
    expect(await rowFor('evt_crash_before_commit')).toBeUndefined()

    const child = await start()
    const retry = await deliverOrder(child.url, 'evt_crash_before_commit')
    expect(retry.status).toBe(200)
    expect(await retry.json()).toMatchObject({ status: 'accepted' })
    await expect
      .poll(async () => (await rowFor('evt_crash_before_commit'))?.status, { timeout: 15_000 })
      .toBe('done')
    expect(await effects('evt_crash_before_commit')).toBe(1)
  })

  it('after the commit, before the response: the row is there, leased by its claim; the retry is a duplicate; processed once', async () => {
    const crashing = await start('receive.after_commit')
    await expect(deliverOrder(crashing.url, 'evt_crash_after_commit')).rejects.toThrow()
    await killedBy(crashing)
    // A process that works what it claims inserts the row leased to itself (Worker.reserveHere).
    expect(await rowFor('evt_crash_after_commit')).toMatchObject({
      status: 'processing',
      attempts: 1,
      jobId: 'hand-off',
    })

    const child = await start()
    const retry = await deliverOrder(child.url, 'evt_crash_after_commit')
    expect(await retry.json()).toMatchObject({ status: 'duplicate' })
    // The relay's orphan recovery, once the lease (2 s) has run out and the row was quiet for 5 s.
    await expect
      .poll(async () => (await rowFor('evt_crash_after_commit'))?.status, { timeout: 20_000 })
      .toBe('done')
    expect(await effects('evt_crash_after_commit')).toBe(1)
    expect(invocations('evt_crash_after_commit')).toBe(1)
  })

  it('after the response, before the run: the 200 stands and the row its claim leased is processed once', async () => {
    const crashing = await start('receive.before_run')
    const response = await deliverOrder(crashing.url, 'evt_crash_before_run')
    expect(response.status).toBe(200)
    expect(await response.json()).toMatchObject({ status: 'accepted' })
    await killedBy(crashing)
    expect(await rowFor('evt_crash_before_run')).toMatchObject({
      status: 'processing',
      attempts: 1,
      jobId: 'hand-off',
    })
    expect(invocations('evt_crash_before_run')).toBe(0)

    await start()
    await expect
      .poll(async () => (await rowFor('evt_crash_before_run'))?.status, { timeout: 20_000 })
      .toBe('done')
    expect(await effects('evt_crash_before_run')).toBe(1)
    expect(invocations('evt_crash_before_run')).toBe(1)
  })

  it('after the response, before the enqueue (an api-only process): the 200 stands and the relay processes the row', async () => {
    const crashing = await start('receive.before_enqueue', 'api')
    const response = await deliverOrder(crashing.url, 'evt_crash_before_enqueue')
    expect(response.status).toBe(200)
    expect(await response.json()).toMatchObject({ status: 'accepted' })
    await killedBy(crashing)
    expect(await rowFor('evt_crash_before_enqueue')).toMatchObject({ status: 'pending', enqueuedAt: null })

    await start()
    await expect
      .poll(async () => (await rowFor('evt_crash_before_enqueue'))?.status, { timeout: 15_000 })
      .toBe('done')
    expect(await effects('evt_crash_before_enqueue')).toBe(1)
  })

  it('inside the handler, before DONE: the handler runs again and its write exists once', async () => {
    const crashing = await start('worker.before_done')
    expect((await deliverOrder(crashing.url, 'evt_crash_in_handler')).status).toBe(200)
    await killedBy(crashing)
    expect(invocations('evt_crash_in_handler')).toBe(1)
    expect(await rowFor('evt_crash_in_handler')).toMatchObject({ status: 'processing', attempts: 1 })
    expect(await effects('evt_crash_in_handler')).toBe(0)

    await start()
    await expect
      .poll(async () => (await rowFor('evt_crash_in_handler'))?.status, { timeout: 20_000 })
      .toBe('done')
    expect(invocations('evt_crash_in_handler')).toBe(2)
    expect(await rowFor('evt_crash_in_handler')).toMatchObject({ attempts: 2 })
    expect(await effects('evt_crash_in_handler')).toBe(1)
  })

  it("after the handler's commit, before the job is acknowledged: not run again", async () => {
    // Received by an api-only process, so the event travels as a job: a process that works what it
    // claims would start it without one (runHere).
    const crashing = await start('worker.after_done', 'worker')
    const api = await start(undefined, 'api')
    expect((await deliverOrder(api.url, 'evt_crash_after_done')).status).toBe(200)
    await killedBy(crashing)
    await api.kill()
    expect(await rowFor('evt_crash_after_done')).toMatchObject({ status: 'done' })

    const row = await rowFor('evt_crash_after_done')
    const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: null })
    const queue = new Queue(INBOUND_QUEUE, {
      connection,
      prefix: deploymentQueuePrefix(harness.database.deploymentId),
    })
    const jobId = processEventJobId(row?.id ?? '')
    // The dead worker never acknowledged the job: it is still active in Redis.
    expect(await queue.getJobState(jobId)).toBe('active')

    await start()
    // The stall check hands the job to the new worker, which finds the row DONE and runs nothing.
    await expect.poll(() => queue.getJobState(jobId), { timeout: 20_000 }).toBe('completed')
    await queue.close()
    connection.disconnect()
    expect(invocations('evt_crash_after_done')).toBe(1)
    expect(await effects('evt_crash_after_done')).toBe(1)
    expect(await rowFor('evt_crash_after_done')).toMatchObject({ status: 'done', attempts: 1 })
  })
})
