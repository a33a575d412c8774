import { Writable } from 'node:stream'
import { sql } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import { readEnvironment } from '../../src/config/env.js'
import { createLogger } from '../../src/logger.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { INBOUND_QUEUE, type ProcessEventData } from '../../src/queue/jobs.js'
import { startService } from '../../src/service/service.js'
import { testRedisUrl } from '../support/env.js'
import { gate, holdInTransaction } from '../support/gate.js'
import { FAST_RELAY, FAST_WORKER, serviceHarness } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'
import { claimRows } from '../support/stored-events.js'

// The worker shares its lease and DONE statements among the events that reach them within a
// millisecond (src/db/batcher.ts), and a job carries the rows claimed together. These tests pin what
// that must never change: one event's failure, slowness or bad answer stays its own.

const harness = serviceHarness({
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
})

const worker = { ...FAST_WORKER, concurrency: 16 }
const config = (handler: Record<string, unknown> | undefined) =>
  testConfig({ worker, relay: FAST_RELAY }, { handler })

async function deliver(url: string, id: string) {
  const body = JSON.stringify({ type: 'test.event', id })
  const response = await fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
}

async function statuses(prefix: string) {
  return harness.database.sql<{ event_id: string; status: string; outcomes: string[] }[]>`
    select e.event_id, e.status::text,
           coalesce(array_agg(a.outcome order by a.attempt) filter (where a.id is not null), '{}') as outcomes
    from inbound_events e left join event_attempts a on a.event_row_id = e.id
    where e.event_id like ${`${prefix}%`}
    group by e.event_id, e.status order by e.event_id`
}

const ids = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => `${prefix}${String(i).padStart(2, '0')}`)

/** A code handler that writes its effect, then throws on the first try of one event. */
function writesThenFailsFirstTry(failing: string | undefined): EventHandler {
  let failed = false
  return async ({ eventId, tx }) => {
    await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
    if (eventId === failing && !failed) {
      failed = true
      throw new Error('the first try of this one fails')
    }
  }
}

/** Every event DONE, the failing one after one error, and each handler write committed once. */
async function expectEachDoneOnce(prefix: string, events: string[], failing: string | undefined) {
  await expect
    .poll(async () => (await statuses(prefix)).every((row) => row.status === 'done'), { timeout: 15_000 })
    .toBe(true)
  for (const row of await statuses(prefix)) {
    expect(row.outcomes).toEqual(row.event_id === failing ? ['error', 'done'] : ['done'])
  }
  const effects = await harness.database.sql<{ event_id: string; n: number }[]>`
    select event_id, count(*)::int as n from handler_effects where event_id like ${`${prefix}%`} group by event_id`
  expect(effects).toHaveLength(events.length)
  expect(effects.every((row) => row.n === 1)).toBe(true)
}

const processing = async (prefix: string) =>
  (await statuses(prefix)).filter((row) => row.status === 'processing').length

/**
 * A code handler whose first call waits for `release`; each call notes its event and how long the
 * row's lease had left when it started.
 */
function holdFirstHandler() {
  const held = gate()
  const started: { eventId: string; leaseLeftMs: number }[] = []
  const handler: EventHandler = async ({ eventId, tx }) => {
    const [lease] = await tx.execute<{ left_ms: number }>(sql`
      select (extract(epoch from lease_until - clock_timestamp()) * 1000)::float8 as left_ms
      from inbound_events where source = 'acme' and event_id = ${eventId}`)
    started.push({ eventId, leaseLeftMs: Number(lease?.left_ms) })
    if (started.length === 1) await held.opened
  }
  return { handler, started, release: held.open }
}

/**
 * The events committed without a job (the relay hands them on in one), and a worker running one
 * handler (and one job) at a time under FAST_WORKER's 3 s lease and 2 s deadline: a row that waits
 * over 0.5 s for its slot is renewed.
 */
async function startOneAtATime(events: string[], handler: EventHandler | { forwardTo: string }) {
  await claimRows(harness.database.sql, events)
  await startWorkerOneAtATime(handler)
}

/** startOneAtATime's worker, on rows committed already. */
async function startWorkerOneAtATime(handler: EventHandler | { forwardTo: string }) {
  await harness.start({
    config: testConfig(
      {
        worker: { ...FAST_WORKER, concurrency: 1 },
        relay: { intervalMs: 200, graceMs: 0, orphanAfterMs: 3_600_000 },
      },
      { handler: 'forwardTo' in handler ? { type: 'forward', url: handler.forwardTo } : undefined },
    ),
    ...('forwardTo' in handler ? {} : { handlers: { acme: handler } }),
    role: 'worker',
  })
}

/**
 * A destination that holds its first request until `release` and answers every other at once; each
 * request is first shown to `onRequest` (by event id).
 */
async function holdFirstRequest(onRequest: (eventId: string) => Promise<void> = async () => {}) {
  const held = gate()
  const sink = await startSink(async (request, index) => {
    await onRequest(String(request.headers['x-hookledger-event-id']))
    if (index === 0) await held.opened
    return { status: 200, body: 'ok' }
  })
  const eventIds = () => sink.received.map((request) => String(request.headers['x-hookledger-event-id']))
  return { sink, eventIds, release: held.open }
}

describe('batched processing', () => {
  it('a code handler that throws for one event of a batch: the others commit DONE once, it retries alone', async () => {
    const events = ids('evt_batch_code_', 24)
    const failing = events[7]
    const handler = writesThenFailsFirstTry(failing)
    const running = await harness.start({ config: config(undefined), handlers: { acme: handler } })
    const url = running.url
    await Promise.all(events.map((id) => deliver(url, id)))
    await expectEachDoneOnce('evt_batch_code_', events, failing)
  })

  it('rows committed together travel as one job; the one that must run again gets a job of its own', async () => {
    const events = ids('evt_batch_job_', 40)
    const failing = events[11]
    const handler = writesThenFailsFirstTry(failing)
    // Committed without a job, as after a lost enqueue: the relay's one pass hands them on together.
    await claimRows(harness.database.sql, events)
    const running = await harness.start({
      config: testConfig(
        { worker, relay: { intervalMs: 200, graceMs: 0, orphanAfterMs: 3_600_000 } },
        { handler: undefined },
      ),
      handlers: { acme: handler },
      role: 'worker',
    })
    await expectEachDoneOnce('evt_batch_job_', events, failing)

    const queue = running.service.queue
    if (queue.kind !== 'bullmq') throw new Error('this test needs the BullMQ queue')
    const inbound = queue.queues.find((candidate) => candidate.name === INBOUND_QUEUE)
    const [failingRow] = await harness.database.sql<{ id: string }[]>`
      select id from inbound_events where event_id = ${failing ?? ''}`
    // The other tests of this file share the database, so its deployment's queue: only these rows' jobs.
    const rows = new Set(
      (
        await harness.database.sql<
          { id: string }[]
        >`select id from inbound_events where event_id like 'evt_batch_job_%'`
      ).map((row) => row.id),
    )
    const jobs = ((await inbound?.getJobs(['completed'])) ?? []).filter((job) =>
      (job.data as ProcessEventData).eventRowIds.some((id) => rows.has(id)),
    )
    // One job for all 40 rows, and one more for the row that failed once (its retry, delayed).
    expect(jobs.map((job) => (job.data as ProcessEventData).eventRowIds.length).sort()).toEqual([1, 40])
    const retry = jobs.find((job) => (job.data as ProcessEventData).eventRowIds.length === 1)
    expect(retry?.data).toEqual({ eventRowIds: [failingRow?.id] })
  })

  it('a forward whose destination fails one event of a batch: the others are sent once, it alone again', async () => {
    const events = ids('evt_batch_fwd_', 24)
    const failing = events[3]
    let refused = false
    const sink = await startSink((request) => {
      if (request.headers['x-hookledger-event-id'] === failing && !refused) {
        refused = true
        return { status: 503 }
      }
      return { status: 200, body: 'ok' }
    })
    try {
      const running = await harness.start({ config: config({ type: 'forward', url: sink.url }) })
      const url = running.url
      await Promise.all(events.map((id) => deliver(url, id)))
      await expect
        .poll(async () => (await statuses('evt_batch_fwd_')).every((row) => row.status === 'done'), {
          timeout: 15_000,
        })
        .toBe(true)
      for (const row of await statuses('evt_batch_fwd_')) {
        expect(row.outcomes).toEqual(row.event_id === failing ? ['error', 'done'] : ['done'])
      }
      const sent = sink.received.map((request) => String(request.headers['x-hookledger-event-id']))
      expect(sent.filter((id) => id === failing)).toHaveLength(2)
      expect(sent.filter((id) => id !== failing).sort()).toEqual(events.filter((id) => id !== failing))
    } finally {
      await sink.close()
    }
  })

  it('a destination slow for one event does not hold the others back', async () => {
    const events = ids('evt_batch_slow_', 12)
    const slow = events[0]
    const { opened: held, open: release } = gate()
    const sink = await startSink(() => ({ status: 200, body: 'ok' }))
    // The slow event's answer waits for the test; everything else is answered at once.
    const slowSink = await startHoldingSink(slow ?? '', () => held, sink.url)
    try {
      const running = await harness.start({ config: config({ type: 'forward', url: slowSink.url }) })
      const url = running.url
      await Promise.all(events.map((id) => deliver(url, id)))
      await expect
        .poll(
          async () =>
            (await statuses('evt_batch_slow_')).filter(
              (row) => row.event_id !== slow && row.status === 'done',
            ).length,
          { timeout: 15_000 },
        )
        .toBe(events.length - 1)
      // Every other event committed while the slow one's answer had not even been sent.
      expect(slowSink.answeredSlow()).toBe(false)
      release()
      await expect
        .poll(async () => (await statuses(slow ?? '')).map((row) => row.status), { timeout: 15_000 })
        .toEqual(['done'])
    } finally {
      release()
      await slowSink.close()
      await sink.close()
    }
  })

  it('leases at most three times `concurrency` rows; a row that waited for its slot starts with a renewed lease', async () => {
    const events = ids('evt_batch_ahead_', 6)
    const first = holdFirstHandler()
    await startOneAtATime(events, first.handler)
    try {
      // The first event in its handler, two leased behind it, the other three not leased yet.
      await expect.poll(() => processing('evt_batch_ahead_'), { timeout: 10_000 }).toBe(3)
      await new Promise((resolve) => setTimeout(resolve, 700))
      expect(await processing('evt_batch_ahead_')).toBe(3)
    } finally {
      first.release()
    }
    await expect
      .poll(async () => (await statuses('evt_batch_ahead_')).every((row) => row.status === 'done'), {
        timeout: 15_000,
      })
      .toBe(true)
    expect(first.started.map((start) => start.eventId).sort()).toEqual(events)
    // The second and third waited ~0.7 s behind the first; unrenewed, their leases would have had
    // ~2.3 s left.
    expect(first.started[1]?.leaseLeftMs).toBeGreaterThan(FAST_WORKER.leaseMs - 400)
    expect(first.started[2]?.leaseLeftMs).toBeGreaterThan(FAST_WORKER.leaseMs - 400)
  })

  it('a forward leased ahead and taken over while it waited is left to the new holder, never sent', async () => {
    const events = ids('evt_batch_taken_', 3)
    const destination = await holdFirstRequest()
    try {
      await startOneAtATime(events, { forwardTo: destination.sink.url })
      let taken: string | undefined
      try {
        await expect.poll(() => processing('evt_batch_taken_'), { timeout: 10_000 }).toBe(3)
        // The row in flight must have reached the destination before one of the two waiting behind it
        // is taken over: on a busy host it can arrive after the three leases committed.
        await expect.poll(() => destination.eventIds().length, { timeout: 10_000 }).toBe(1)
        // What another worker's takeover leaves: the row still PROCESSING under a lease token not ours.
        const [row] = await harness.database.sql<{ event_id: string }[]>`
          update inbound_events set lease_token = gen_random_uuid()
          where id = (select id from inbound_events
                      where event_id like 'evt_batch_taken_%' and status = 'processing'
                        and event_id <> ${destination.eventIds()[0] ?? ''}
                      order by event_id limit 1)
          returning event_id`
        taken = row?.event_id
        await new Promise((resolve) => setTimeout(resolve, 700))
      } finally {
        destination.release()
      }
      expect(taken).toBeDefined()
      const others = events.filter((id) => id !== taken)
      await expect
        .poll(
          async () =>
            (await statuses('evt_batch_taken_'))
              .filter((row) => row.event_id !== taken)
              .every((row) => row.status === 'done'),
          { timeout: 15_000 },
        )
        .toBe(true)
      expect(destination.eventIds().sort()).toEqual(others)
      expect((await statuses(taken ?? '')).map((row) => [row.status, row.outcomes])).toEqual([
        ['processing', []],
      ])
    } finally {
      destination.release()
      await destination.sink.close()
    }
  })

  it('rows locked for a moment as the worker leases them (an enqueue mark waiting) are leased in their job once free', async () => {
    const prefix = 'evt_batch_locked_'
    const events = ids(prefix, 3)
    const destination = await holdFirstRequest()
    let unlock = async () => {}
    try {
      await claimRows(harness.database.sql, events)
      // The relay's enqueue mark (an UPDATE of the three rows) waits on this lock holding the other
      // two, so the worker's lease finds all three locked: not held by any lease, not free either.
      unlock = await holdInTransaction(
        harness.database.sql,
        (tx) => tx`select id from inbound_events where event_id = ${events[2] ?? ''} for update`,
      )
      await startWorkerOneAtATime({ forwardTo: destination.sink.url })
      await expect
        .poll(
          async () =>
            (
              await harness.database.sql<{ waiting: number }[]>`
                select count(*)::int as waiting from pg_stat_activity
                where datname = current_database() and wait_event_type = 'Lock'`
            )[0]?.waiting,
          { timeout: 10_000 },
        )
        .toBeGreaterThan(0)
      await unlock()
      // The first in its handler (its request held), the other two leased behind it: all three
      // leased by their job's lease looking again. Sent each to a job of its own instead, one at a
      // time as this worker runs jobs, no two of them would be leased while the first is held.
      await expect.poll(() => processing(prefix), { timeout: 10_000 }).toBe(3)
    } finally {
      await unlock()
      destination.release()
    }
    try {
      await expect
        .poll(async () => (await statuses(prefix)).every((row) => row.status === 'done'), { timeout: 15_000 })
        .toBe(true)
      expect(destination.eventIds().sort()).toEqual(events)
    } finally {
      await destination.sink.close()
    }
  })

  it("a forward's handler slot is freed once its call succeeded; forwards whose DONE commits still count as leased", async () => {
    const events = ids('evt_batch_freed_', 5)
    const sink = await startSink(() => ({ status: 200, body: 'ok' }))
    // Every DONE writes an attempt row: while this lock is held, no DONE can commit. Leases, claims
    // and the forwards themselves write no attempt row.
    const unlock = await holdInTransaction(
      harness.database.sql,
      (tx) => tx`lock table event_attempts in share mode`,
    )
    try {
      await startOneAtATime(events, { forwardTo: sink.url })
      // One handler at a time, yet three events are sent while none is DONE: each freed its slot as
      // its destination answered. The fourth waits for a place, as three rows are leased already.
      await expect.poll(() => sink.received.length, { timeout: 10_000 }).toBe(3)
      await new Promise((resolve) => setTimeout(resolve, 700))
      expect(sink.received).toHaveLength(3)
      expect(await processing('evt_batch_freed_')).toBe(3)
    } finally {
      await unlock()
    }
    try {
      await expect
        .poll(async () => (await statuses('evt_batch_freed_')).map((row) => row.outcomes), {
          timeout: 15_000,
        })
        .toEqual(events.map(() => ['done']))
      expect(sink.received).toHaveLength(events.length)
    } finally {
      await sink.close()
    }
  })

  it('records the wall-clock end of a slow attempt, not the start of its transaction', async () => {
    const sink = await startSink(() => ({ status: 200, body: 'ok' }))
    const slowSink = await startHoldingSink(
      'evt_batch_clock',
      () => new Promise((r) => setTimeout(r, 1200)),
      sink.url,
    )
    try {
      const running = await harness.start({ config: config({ type: 'forward', url: slowSink.url }) })
      await deliver(running.url, 'evt_batch_clock')
      await expect
        .poll(async () => (await statuses('evt_batch_clock'))[0]?.status, { timeout: 15_000 })
        .toBe('done')
      const [attempt] = await harness.database.sql<{ seconds: number }[]>`
        select extract(epoch from a.finished_at - a.started_at)::float8 as seconds
        from event_attempts a join inbound_events e on e.id = a.event_row_id where e.event_id = 'evt_batch_clock'`
      expect(attempt?.seconds).toBeGreaterThanOrEqual(1.1)
    } finally {
      await slowSink.close()
      await sink.close()
    }
  })

  it('stores a destination answer Postgres could not hold as text (a NUL), without failing the batch', async () => {
    const events = ids('evt_batch_nul_', 8)
    const sink = await startSink((request) =>
      request.headers['x-hookledger-event-id'] === events[0]
        ? { status: 200, body: 'before\u0000after' }
        : { status: 200, body: 'ok' },
    )
    try {
      const running = await harness.start({ config: config({ type: 'forward', url: sink.url }) })
      const url = running.url
      await Promise.all(events.map((id) => deliver(url, id)))
      await expect
        .poll(async () => (await statuses('evt_batch_nul_')).map((row) => row.outcomes), { timeout: 15_000 })
        .toEqual(events.map(() => ['done']))
      const [first] = await harness.database.sql<{ response_excerpt: string }[]>`
        select a.response_excerpt from event_attempts a join inbound_events e on e.id = a.event_row_id
        where e.event_id = ${events[0] ?? ''}`
      expect(first?.response_excerpt).toBe('before\ufffdafter')
    } finally {
      await sink.close()
    }
  })

  it('logs and stores the cause of a failing query in a handler, never its parameters', async () => {
    const lines: string[] = []
    const logger = createLogger(
      'info',
      new Writable({
        write(chunk, _, callback) {
          lines.push(String(chunk))
          callback()
        },
      }),
    )
    const secret = 'card_4242_do_not_log'
    const service = await startService({
      env: readEnvironment({
        DATABASE_URL: harness.database.url,
        REDIS_URL: testRedisUrl(),
        PORT: '0',
        HOST: '127.0.0.1',
      }),
      config: testConfig(
        { worker: { ...FAST_WORKER, maxAttempts: 1 }, relay: FAST_RELAY },
        { handler: undefined },
      ),
      handlers: {
        acme: async ({ tx, eventId }) => {
          await tx.execute(sql`insert into orders_paid (event_id, note) values (${eventId}, ${secret})`)
        },
      },
      logger,
    })
    try {
      await deliver(service.url, 'evt_batch_cause')
      await expect
        .poll(async () => (await statuses('evt_batch_cause'))[0]?.status, { timeout: 15_000 })
        .toBe('failed')
      const [row] = await harness.database.sql<{ last_error: string }[]>`
        select last_error from inbound_events where event_id = 'evt_batch_cause'`
      expect(row?.last_error).toContain('relation "orders_paid" does not exist')
      expect(row?.last_error).not.toContain(secret)
      const logged = lines.join('')
      expect(logged).toContain('relation \\"orders_paid\\" does not exist')
      expect(logged).not.toContain(secret)
    } finally {
      await service.close()
    }
  })
})

/**
 * A proxy destination in front of `upstream` that holds the answer for one event id until `held`
 * settles; every other request is passed on at once.
 */
async function startHoldingSink(slowId: string, hold: () => Promise<unknown>, upstream: string) {
  const { createServer } = await import('node:http')
  let answeredSlow = false
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', async () => {
      if (request.headers['x-hookledger-event-id'] === slowId) await hold()
      const answer = await fetch(upstream, {
        method: 'POST',
        body: Buffer.concat(chunks),
        headers: { 'x-hookledger-event-id': String(request.headers['x-hookledger-event-id']) },
      })
      if (request.headers['x-hookledger-event-id'] === slowId) answeredSlow = true
      response.writeHead(answer.status).end(await answer.text())
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    answeredSlow: () => answeredSlow,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
