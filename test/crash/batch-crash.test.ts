import { describe, expect, it } from 'vitest'
import type { FailpointName } from '../../src/failpoints.js'
import { crashWitness, deliverOrder } from '../support/crash-ledger.js'
import { serviceHarness } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { uniquePrefix } from '../support/stack.js'

// The worker shares statements among the events of one turn. A SIGKILL in the middle of such a batch
// (the first event to reach its DONE mark, or to have it committed, kills the process while its
// neighbours are at every other step) must still leave every event DONE after a restart, with no
// handler's writes made twice and no forward of an event DONE sent again.

const harness = serviceHarness({
  folder: 'hookledger-batch-crash-',
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
})

const { effects, invocations } = crashWitness(harness)

const EVENTS = 30

function writeConfig(
  name: string,
  handler: Record<string, unknown> | undefined,
  worker: Record<string, unknown>,
) {
  return harness.writeConfig(
    {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          ...(handler ? { handler } : {}),
        },
      ],
      worker: { concurrency: 16, maxAttempts: 5, backoffBaseMs: 50, stalledIntervalMs: 1000, ...worker },
      relay: { intervalMs: 200, graceMs: 300, orphanAfterMs: 2000 },
      queue: { prefix: `${uniquePrefix()}-${name}` },
    },
    `${name}.json`,
  )
}

/** The crash server (code handler) takes its role from the environment, `serve` from its flag. */
type Entry = (role: string) => string[]
const CODE: Entry = () => ['test/support/crash-server.mjs']
const SERVE: Entry = (role) => ['bin/hookledger.js', 'serve', '--role', role]

function start(entry: Entry, configPath: string, role: string, failpoint?: FailpointName) {
  return harness.startChild({ entry: entry(role), configPath, env: { TEST_ROLE: role }, failpoint })
}

/**
 * Starts a worker that kills itself at `failpoint`, then sends it a burst of events through an
 * api-only process, so the first event to reach that point dies with a batch around it.
 */
async function crashInBatch(entry: Entry, config: string, prefix: string, failpoint: FailpointName) {
  const crashing = await start(entry, config, 'worker', failpoint)
  const api = await start(entry, config, 'api')
  const ids = Array.from({ length: EVENTS }, (_, i) => `${prefix}${i}`)
  for (const response of await Promise.all(ids.map((id) => deliverOrder(api.url, id)))) {
    expect(response.status).toBe(200)
  }
  expect(await crashing.exited).toBe('SIGKILL')
  await api.kill('SIGTERM')
  return ids
}

async function statuses(prefix: string) {
  const rows = await harness.database.sql<{ status: string }[]>`
    select status::text from inbound_events where event_id like ${`${prefix}%`}`
  return rows.map((row) => row.status)
}

describe('SIGKILL in the middle of a batch', { timeout: 180_000 }, () => {
  it('code handlers: every event ends DONE and each handler write committed exactly once', async () => {
    const config = writeConfig('code', undefined, { handlerTimeoutMs: 1000, leaseMs: 2000 })
    const ids = await crashInBatch(CODE, config, 'evt_bcrash_code_', 'worker.before_done')
    expect((await statuses('evt_bcrash_code_')).filter((s) => s === 'done').length).toBeLessThan(EVENTS)

    await start(CODE, config, 'worker')
    await expect
      .poll(async () => (await statuses('evt_bcrash_code_')).every((s) => s === 'done'), { timeout: 30_000 })
      .toBe(true)
    for (const id of ids) expect(await effects(id)).toBe(1)
    // At least one handler ran in the killed process and again after it: the writes still count once.
    expect(ids.some((id) => invocations(id) > 1)).toBe(true)
  })

  it('forwards, killed as the first DONE commits: every event ends DONE; none DONE before the kill is sent again', async () => {
    const run = await crashForwards('worker.after_done', 'evt_bcrash_fwd_')
    expect(run.doneBeforeRestart.length).toBeGreaterThan(0)
    for (const eventId of run.doneBeforeRestart) {
      expect(run.sent.filter((id) => id === eventId)).toHaveLength(1)
    }
    expect(run.sent.length - run.ids.length).toBeLessThanOrEqual(run.inFlight)
  })

  it('forwards, killed as the first answered forward reaches its DONE: that one is sent once more, under its key', async () => {
    const run = await crashForwards('worker.before_done', 'evt_bcrash_ans_')
    // The event that reached its DONE mark had its 2xx, and no DONE committed before the kill: it is
    // the window an at-least-once forward has, so it goes out once more with the same key.
    expect(run.doneBeforeRestart).toEqual([])
    expect(run.sent.length).toBeGreaterThan(run.ids.length)
    expect(run.sent.length - run.ids.length).toBeLessThanOrEqual(run.inFlight)
  })
})

/**
 * Kills a forwarding worker at `failpoint` in the middle of a batch, restarts one, and waits for
 * every event to end DONE. Answers take a while, so the kill finds forwards in flight and forwards
 * answered whose DONE is still to commit. Their events stay leased for the worker's lease (6 s here)
 * after the crash; waiting for it uses up no attempt (three here, 50–200 ms apart), so every event
 * ends DONE, none FAILED. Every send carries its event's key, and the forwards write nothing to the
 * outbound ledger: the events' rows are their record.
 */
async function crashForwards(failpoint: FailpointName, prefix: string) {
  const sink = await startSink(() => ({ status: 200, body: 'ok' }))
  const slowSink = await startDelayingProxy(sink.url, 300)
  try {
    const config = writeConfig(
      `forward-${failpoint}`,
      { type: 'forward', url: slowSink.url, timeoutMs: 3000 },
      { handlerTimeoutMs: 5000, leaseMs: 6000, maxAttempts: 3, backoffMaxMs: 200 },
    )
    const ids = await crashInBatch(SERVE, config, prefix, failpoint)
    const done = await harness.database.sql<{ event_id: string }[]>`
      select event_id from inbound_events where event_id like ${`${prefix}%`} and status = 'done'`
    const [inFlight] = await harness.database.sql<{ n: number }[]>`
      select count(*)::int as n from inbound_events where event_id like ${`${prefix}%`} and status = 'processing'`
    expect(inFlight?.n).toBeGreaterThan(0)

    await start(SERVE, config, 'worker')
    await expect
      .poll(async () => (await statuses(prefix)).every((s) => s === 'done'), { timeout: 60_000 })
      .toBe(true)
    const sent = sink.received.map((request) => String(request.headers['x-hookledger-event-id']))
    expect(new Set(sent)).toEqual(new Set(ids))
    for (const request of sink.received) {
      expect(request.headers['idempotency-key']).toBe(`acme:${request.headers['x-hookledger-event-id']}`)
    }
    const [operations] = await harness.database.sql<
      { n: number }[]
    >`select count(*)::int as n from operations where operation_key like ${`acme:${prefix}%`}`
    expect(operations?.n).toBe(0)
    return { ids, sent, doneBeforeRestart: done.map((row) => row.event_id), inFlight: inFlight?.n ?? 0 }
  } finally {
    await slowSink.close()
    await sink.close()
  }
}

describe('SIGKILL after the lease, before the forward was sent', { timeout: 60_000 }, () => {
  it('the restarted worker takes the event over once its lease runs out and sends it once', async () => {
    const sink = await startSink(() => ({ status: 200, body: 'ok' }))
    try {
      const config = writeConfig(
        'leased',
        { type: 'forward', url: sink.url, timeoutMs: 1000 },
        { handlerTimeoutMs: 2000, leaseMs: 3000, backoffMaxMs: 200 },
      )
      const crashing = await start(SERVE, config, 'all', 'forward.before_send')
      expect((await deliverOrder(crashing.url, 'evt_leased_crash')).status).toBe(200)
      expect(await crashing.exited).toBe('SIGKILL')
      // The lease committed, with its attempt counted; nothing was sent.
      const [leased] = await harness.database.sql<{ status: string; attempts: number }[]>`
        select status::text, attempts from inbound_events where event_id = 'evt_leased_crash'`
      expect(leased).toEqual({ status: 'processing', attempts: 1 })
      expect(sink.received).toHaveLength(0)

      await start(SERVE, config, 'all')
      await expect.poll(async () => (await statuses('evt_leased_crash'))[0], { timeout: 30_000 }).toBe('done')
      expect(sink.received).toHaveLength(1)
      expect(sink.received[0]?.headers['x-hookledger-attempt']).toBe('2')
      const attempts = await harness.database.sql<{ attempt: number; outcome: string }[]>`
        select a.attempt, a.outcome from event_attempts a join inbound_events e on e.id = a.event_row_id
        where e.event_id = 'evt_leased_crash'`
      expect(attempts).toEqual([{ attempt: 2, outcome: 'done' }])
    } finally {
      await sink.close()
    }
  })
})

/** A destination in front of `upstream` that answers every request `delayMs` late. */
async function startDelayingProxy(upstream: string, delayMs: number) {
  const { createServer } = await import('node:http')
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', async () => {
      await new Promise((resolve) => setTimeout(resolve, delayMs))
      const headers = Object.fromEntries(
        Object.entries(request.headers).filter(
          ([name]) => name.startsWith('x-hookledger') || name === 'idempotency-key',
        ),
      ) as Record<string, string>
      const answer = await fetch(upstream, { method: 'POST', body: Buffer.concat(chunks), headers }).catch(
        () => undefined,
      )
      response.writeHead(answer?.status ?? 502).end(answer === undefined ? '' : await answer.text())
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
