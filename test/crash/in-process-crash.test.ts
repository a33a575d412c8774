import { inArray } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import { inboundEvents } from '../../src/db/schema.js'
import type { FailpointName } from '../../src/failpoints.js'
import { crashWitness, deliverOrder } from '../support/crash-ledger.js'
import { serviceHarness } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'

// The crash windows again with REDIS_URL unset: the jobs die with the process, and the restarted one
// must find the work in the ledger alone, well before orphan recovery (set to a minute here) would.

const harness = serviceHarness({
  folder: 'hookledger-inproc-crash-',
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
  config: {
    sources: [{ id: 'acme', verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] } }],
    worker: {
      concurrency: 4,
      maxAttempts: 5,
      backoffBaseMs: 50,
      handlerTimeoutMs: 1000,
      leaseMs: 2000,
      stalledIntervalMs: 1000,
    },
    relay: { intervalMs: 200, graceMs: 500, orphanAfterMs: 60_000 },
  },
  // Empty counts as unset, and overrides a REDIS_URL the test runner's environment may carry.
  env: { REDIS_URL: '' },
})

const start = (failpoint?: FailpointName) =>
  harness.startChild({ entry: ['test/support/crash-server.mjs'], failpoint })

const { rowFor, effects, invocations } = crashWitness(harness)

describe('crash windows with the in-process queue (SIGKILL, then a restart)', () => {
  it('announces the in-process queue loudly at start', async () => {
    const child = await start()
    expect(child.output()).toMatch(/"level":40.*in-process queue.*ONE hookledger process/)
  })

  it('inside the handler, before DONE: the restarted process runs it again and its write exists once', async () => {
    const crashing = await start('worker.before_done')
    expect((await deliverOrder(crashing.url, 'evt_inproc_in_handler')).status).toBe(200)
    expect(await crashing.exited).toBe('SIGKILL')
    expect(await rowFor('evt_inproc_in_handler')).toMatchObject({ status: 'processing', attempts: 1 })
    expect(await effects('evt_inproc_in_handler')).toBe(0)

    const restartedAt = Date.now()
    await start()
    // The lease (2 s) must run out first; orphan recovery would take a minute more.
    await expect
      .poll(async () => (await rowFor('evt_inproc_in_handler'))?.status, { timeout: 15_000 })
      .toBe('done')
    expect(Date.now() - restartedAt).toBeLessThan(15_000)
    expect(invocations('evt_inproc_in_handler')).toBe(2)
    expect(await rowFor('evt_inproc_in_handler')).toMatchObject({ attempts: 2 })
    expect(await effects('evt_inproc_in_handler')).toBe(1)
  })

  it('killed with a backlog: every committed row reaches DONE once after the restart', async () => {
    const crashing = await start('worker.before_done')
    const ids = Array.from({ length: 30 }, (_, i) => `evt_inproc_backlog_${i}`)
    const answers = await Promise.allSettled(ids.map((id) => deliverOrder(crashing.url, id)))
    expect(await crashing.exited).toBe('SIGKILL')
    const accepted = ids.filter((_, i) => {
      const answer = answers[i]
      return answer?.status === 'fulfilled' && answer.value.status === 200
    })
    // A 200 means a committed row, whatever happened after it.
    const committed = await harness.database.db
      .select()
      .from(inboundEvents)
      .where(inArray(inboundEvents.eventId, ids))
    expect(committed.map((row) => row.eventId)).toEqual(expect.arrayContaining(accepted))
    expect(committed.some((row) => row.status !== 'done')).toBe(true)

    await start()
    await expect
      .poll(
        async () =>
          (
            await harness.database.db.select().from(inboundEvents).where(inArray(inboundEvents.eventId, ids))
          ).every((row) => row.status === 'done'),
        { timeout: 20_000 },
      )
      .toBe(true)
    for (const row of committed) expect(await effects(row.eventId)).toBe(1)
  })

  it('after the response, before the run: the 200 stands and the restarted process handles the row its claim leased', async () => {
    const crashing = await start('receive.before_run')
    expect((await deliverOrder(crashing.url, 'evt_inproc_before_run')).status).toBe(200)
    expect(await crashing.exited).toBe('SIGKILL')
    expect(await rowFor('evt_inproc_before_run')).toMatchObject({ status: 'processing', attempts: 1 })

    const restartedAt = Date.now()
    await start()
    // The lease (2 s) must run out first; orphan recovery would take a minute more.
    await expect
      .poll(async () => (await rowFor('evt_inproc_before_run'))?.status, { timeout: 15_000 })
      .toBe('done')
    expect(Date.now() - restartedAt).toBeLessThan(15_000)
    expect(invocations('evt_inproc_before_run')).toBe(1)
    expect(await effects('evt_inproc_before_run')).toBe(1)
  })
})
