import { Queue } from 'bullmq'
import { eq, sql } from 'drizzle-orm'
import { Redis } from 'ioredis'
import { describe, expect, it } from 'vitest'
import { claimEvents, type NewEvent } from '../../src/db/claims.js'
import { inboundEvents } from '../../src/db/schema.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { INBOUND_QUEUE, PROCESS_EVENT, processEventJobId } from '../../src/queue/jobs.js'
import { testRedisUrl } from '../support/env.js'
import { gate } from '../support/gate.js'
import { FAST_RELAY, FAST_WORKER, serviceHarness } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { testConfig } from '../support/stack.js'

const harness = serviceHarness({
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
})

const config = testConfig({ worker: FAST_WORKER, relay: FAST_RELAY }, { handler: undefined })

const recordingHandler =
  (calls: string[], hold?: Promise<unknown>): EventHandler =>
  async ({ eventId, tx }) => {
    calls.push(eventId)
    await hold
    await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
  }

async function claimOne(event: NewEvent) {
  const [claim] = await claimEvents(harness.database.sql, [event])
  if (claim === undefined) throw new Error('no claim result')
  return claim
}

async function effects(eventId: string) {
  return (
    await harness.database.sql`select count(*)::int as n from handler_effects where event_id = ${eventId}`
  )[0]?.n
}

async function status(id: string) {
  return (await harness.database.db.select().from(inboundEvents).where(eq(inboundEvents.id, id)))[0]?.status
}

/** One signed delivery of `type` under `eventId`; returns its row id. */
async function deliverOne(url: string, eventId: string, type: string): Promise<string> {
  const body = JSON.stringify({ type })
  const response = await fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id: eventId }),
  })
  return ((await response.json()) as { id: string }).id
}

/**
 * A second job for a row the service already has a job for, as a stalled-job redelivery or a
 * relay's recovery would add, under `<the row's own id>-<suffix>`.
 */
async function addSecondJob(queuePrefix: string, rowId: string, suffix: string) {
  const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: null })
  const queue = new Queue(INBOUND_QUEUE, { connection, prefix: queuePrefix })
  const jobId = `${processEventJobId(rowId)}-${suffix}`
  await queue.add(PROCESS_EVENT, { eventRowIds: [rowId] }, { jobId })
  return {
    state: () => queue.getJobState(jobId),
    async close() {
      await queue.close()
      connection.disconnect()
    },
  }
}

describe('exactly once under duplicates', () => {
  it('200 concurrent deliveries of one event: one row, one handler run, every answer 200', async () => {
    const calls: string[] = []
    const running = await harness.start({ config, handlers: { acme: recordingHandler(calls) } })
    const body = JSON.stringify({ type: 'order.paid', order: 551 })
    const headers = signedHeaders(body, { id: 'evt_storm' })
    const url = running.url
    const responses = await Promise.all(
      Array.from({ length: 200 }, () => fetch(`${url}/webhooks/acme`, { method: 'POST', body, headers })),
    )
    expect(responses.map((r) => r.status)).toEqual(Array(200).fill(200))
    const bodies = (await Promise.all(responses.map((r) => r.json()))) as Array<{
      status: string
      id: string
    }>
    const byKind: Record<string, number> = {}
    for (const { status } of bodies) byKind[status] = (byKind[status] ?? 0) + 1
    expect(byKind).toEqual({ accepted: 1, duplicate: 199 })
    expect(new Set(bodies.map((b) => b.id)).size).toBe(1)
    const rows = await harness.database.db
      .select()
      .from(inboundEvents)
      .where(eq(inboundEvents.eventId, 'evt_storm'))
    expect(rows).toHaveLength(1)
    await expect.poll(async () => status(rows[0]?.id ?? ''), { timeout: 10_000 }).toBe('done')
    expect(calls).toEqual(['evt_storm'])
    expect(await effects('evt_storm')).toBe(1)
  })

  it('a job redelivered while its handler still runs does not run the handler again', async () => {
    const calls: string[] = []
    const hold = gate()
    const running = await harness.start({
      config,
      handlers: { acme: recordingHandler(calls, hold.opened) },
    })
    const id = await deliverOne(running.url, 'evt_redelivered', 'slow')
    await expect.poll(() => calls.length, { timeout: 10_000 }).toBe(1)

    // A second job for the same row, as a stalled-job redelivery or a second relay would make.
    const again = await addSecondJob(running.service.queuePrefix, id, 'again')
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(calls).toHaveLength(1)
    hold.open()
    await expect.poll(async () => status(id), { timeout: 10_000 }).toBe('done')
    await expect.poll(async () => again.state(), { timeout: 10_000 }).toBe('completed')
    expect(calls).toHaveLength(1)
    expect(await effects('evt_redelivered')).toBe(1)
    await again.close()
  })

  it("a code handler's transaction that outlives its lease is not overtaken: a second job runs the handler only after it ended", async () => {
    // The handler ignores its deadline inside a statement: the worker gives the attempt up at 500 ms,
    // but its transaction, and the row lock it took with the lease's token, last until the statement
    // ends, long after the 1 s lease. A second job for the row meanwhile must not run the handler.
    const SLEEP_S = 2.5
    const runs: Array<{ started: number; ended?: number }> = []
    const handler: EventHandler = async ({ eventId, tx }) => {
      const run: { started: number; ended?: number } = { started: Date.now() }
      runs.push(run)
      if (runs.length === 1) {
        await tx.execute(sql`select pg_sleep(${SLEEP_S})`)
        run.ended = Date.now()
        return
      }
      await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
      run.ended = Date.now()
    }
    const running = await harness.start({
      config: testConfig(
        { worker: { ...FAST_WORKER, handlerTimeoutMs: 500, leaseMs: 1000 }, relay: FAST_RELAY },
        { handler: undefined },
      ),
      handlers: { acme: handler },
    })
    const id = await deliverOne(running.url, 'evt_outlived_lease', 'slow.statement')
    await expect.poll(() => runs.length, { timeout: 10_000 }).toBe(1)
    const [first] = runs
    // Past the lease, with the first transaction still open: a second job, as a relay's recovery of
    // a row whose lease ran out would add.
    await new Promise((resolve) => setTimeout(resolve, 1300))
    const [row] = await harness.database.sql<Array<{ expired: boolean }>>`
      select lease_until < now() as expired from inbound_events where id = ${id}`
    expect(row?.expired).toBe(true)
    const overtake = await addSecondJob(running.service.queuePrefix, id, 'overtake')

    await expect.poll(async () => status(id), { timeout: 15_000 }).toBe('done')
    expect(runs).toHaveLength(2)
    const [, second] = runs
    expect(first?.ended, 'the row went DONE while the first run was still in its statement').toBeDefined()
    // The second run started only once the first one's statement was over (its transaction then
    // rolled back: the attempt had timed out), never beside it.
    expect(second?.started).toBeGreaterThanOrEqual(first?.ended ?? Number.POSITIVE_INFINITY)
    expect(await effects('evt_outlived_lease')).toBe(1)
    await overtake.close()
  })
})

describe('relay', () => {
  it('enqueues a committed row that never got a job, and it reaches DONE', async () => {
    const calls: string[] = []
    const claim = await claimOne({
      source: 'acme',
      eventId: 'evt_unqueued',
      eventType: 'lost.enqueue',
      payloadHash: 'a'.repeat(64),
      body: Buffer.from('{"type":"lost.enqueue"}'),
      headers: {},
    })
    await harness.start({ config, handlers: { acme: recordingHandler(calls) } })
    await expect.poll(async () => status(claim.id), { timeout: 10_000 }).toBe('done')
    expect(calls).toEqual(['evt_unqueued'])
  })

  it('re-enqueues a row whose job vanished from Redis', async () => {
    const calls: string[] = []
    const claim = await claimOne({
      source: 'acme',
      eventId: 'evt_job_lost',
      eventType: null,
      payloadHash: 'b'.repeat(64),
      body: Buffer.from('{}'),
      headers: {},
    })
    // Marked as enqueued long ago, but no such job exists: Redis lost it.
    await harness.database.db
      .update(inboundEvents)
      .set({ enqueuedAt: sql`now() - interval '1 hour'`, updatedAt: sql`now() - interval '1 hour'` })
      .where(eq(inboundEvents.id, claim.id))
    await harness.start({ config, handlers: { acme: recordingHandler(calls) } })
    await expect.poll(async () => status(claim.id), { timeout: 10_000 }).toBe('done')
    expect(calls).toEqual(['evt_job_lost'])
  })

  it('several relays at once hand a row to the queue once', async () => {
    const calls: string[] = []
    const ids: string[] = []
    for (let i = 0; i < 20; i++) {
      const claim = await claimOne({
        source: 'acme',
        eventId: `evt_many_relays_${i}`,
        eventType: null,
        payloadHash: 'c'.repeat(64),
        body: Buffer.from('{}'),
        headers: {},
      })
      ids.push(claim.id)
    }
    const handler = recordingHandler(calls)
    await Promise.all([0, 1, 2].map(() => harness.start({ config, handlers: { acme: handler } })))
    await expect
      .poll(async () => (await Promise.all(ids.map(status))).every((s) => s === 'done'), {
        timeout: 15_000,
      })
      .toBe(true)
    expect(calls.sort()).toEqual(ids.map((_, i) => `evt_many_relays_${i}`).sort())
  })
})
