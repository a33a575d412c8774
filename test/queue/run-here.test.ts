import { describe, expect, it } from 'vitest'
import { deliverEvent } from '../support/delivery.js'
import { gate } from '../support/gate.js'
import { FAST_RELAY, FAST_WORKER, serviceHarness } from '../support/service.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'

// A process that both receives and works (`serve`, role all) starts the events it claims in its own
// worker while that worker has a free place and Redis takes jobs (src/queue/enqueuer.ts runHere): no
// round through the queue. Beyond the places, events go through the queue as before.

const harness = serviceHarness()

const deliver = (url: string, id: string) => deliverEvent(url, 'acme', id)

/** Each event's status and the job its row was first recorded under. */
const rows = (prefix: string) =>
  harness.database.sql<{ event_id: string; status: string; job_id: string | null }[]>`
    select event_id, status::text, job_id from inbound_events where event_id like ${`${prefix}%`} order by event_id`

describe('the events a process claims, run in it', () => {
  it('start in its own worker without a job, each forwarded once', async () => {
    const sink = await startSink(() => ({ status: 200 }))
    const running = await harness.start({
      config: testConfig(
        { worker: FAST_WORKER, relay: FAST_RELAY },
        { handler: { type: 'forward', url: sink.url } },
      ),
    })
    for (let i = 0; i < 5; i += 1) await deliver(running.url, `evt_here_${i}`)
    await expect
      .poll(async () => (await rows('evt_here_')).every((row) => row.status === 'done'), { timeout: 10_000 })
      .toBe(true)
    // 'hand-off': leased by the process that claimed it, never carried by a queue job.
    expect((await rows('evt_here_')).map((row) => row.job_id)).toEqual(Array(5).fill('hand-off'))
    // Leased by the claim itself: the lease carries the claim transaction's time, and the row was
    // updated once (DONE), never taken PENDING → PROCESSING.
    const writes = await harness.database.sql<{ leased_by_claim: boolean; attempts: number }[]>`
      select e.enqueued_at = e.received_at as leased_by_claim, e.attempts
      from inbound_events e where e.event_id like 'evt_here_%'`
    expect(writes).toEqual(Array(5).fill({ leased_by_claim: true, attempts: 1 }))
    const forwarded = sink.received.map((request) => request.headers['x-hookledger-event-id'])
    expect(forwarded.sort()).toEqual(Array.from({ length: 5 }, (_, i) => `evt_here_${i}`))
  })

  it('go through the queue beyond the worker’s places, and every event is forwarded once', async () => {
    const held = gate()
    const sink = await startSink(async () => {
      await held.opened
      return { status: 200 }
    })
    // Concurrency 1: three places among the leased rows (LEASED_PER_SLOT).
    const running = await harness.start({
      config: testConfig(
        { worker: { ...FAST_WORKER, concurrency: 1 }, relay: FAST_RELAY },
        { handler: { type: 'forward', url: sink.url } },
      ),
    })
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => deliver(running.url, `evt_full_${String(i).padStart(2, '0')}`)),
    )
    await expect.poll(async () => sink.received.length, { timeout: 5000 }).toBe(1)
    held.open()
    await expect
      .poll(async () => (await rows('evt_full_')).every((row) => row.status === 'done'), { timeout: 15_000 })
      .toBe(true)
    const jobs = (await rows('evt_full_')).map((row) => row.job_id)
    expect(jobs.filter((job) => job === 'hand-off')).toHaveLength(3)
    expect(jobs.filter((job) => job?.startsWith('evt'))).toHaveLength(7)
    const forwarded = sink.received.map((request) => String(request.headers['x-hookledger-event-id']))
    expect(new Set(forwarded).size).toBe(10)
    expect(forwarded).toHaveLength(10)
  })
})
