import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { statusCounts } from '../support/delivery.js'
import { startTestService, type TestService } from '../support/service.js'
import { startSink } from '../support/sink.js'
import { temporaryDirectory } from '../support/temp.js'
import { countsById, forwardingConfig, runCli, seedFailedEvents } from './seed.js'

// Replaying 20,000 FAILED events by filter, through the admin API and through `hookledger events
// replay`, against a real destination that counts what it receives per event id: each event must
// arrive exactly once, also when the CLI is interrupted and run again, and the CLI's memory must not
// grow with the number of events.

const ADMIN_TOKEN = 'admin-token-for-the-bulk-replay-tests'
const MANY = 20_000
const FEW = 2_000
// The interrupt test's rows: enough chunks (1,000 a statement) for two interrupts to land mid-way,
// fewer than MANY because forwarding them is what takes the time (~100 rows/s on a loaded machine).
const CUT = 10_000
const directory = temporaryDirectory('hookledger-bulk-replay-')

let sink: Awaited<ReturnType<typeof startSink>>
let service: TestService

beforeAll(async () => {
  sink = await startSink(() => ({ status: 200 }))
  service = await startTestService({
    // The replay is what these tests try; forwarding its 52,000 events is most of their time, so
    // each source forwards on its own, outside the outbound ledger. Each event is still counted
    // at the destination: exactly once.
    config: forwardingConfig(['api', 'cli', 'few', 'cut'], sink.url, { sourceForward: true }),
    env: { ADMIN_TOKEN },
  })
})

afterAll(async () => {
  await service?.close()
  await sink?.close()
})

const replayApi = async (body: Record<string, unknown>) => {
  const response = await fetch(`${service.url}/admin/api/events/replay`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

/**
 * What autovacuum's analyze does on a production server, which this machine's PostgreSQL runs without
 * (doctor's postgres.autovacuum_off): statistics for tables that grew, so that the worker's cached
 * generic plans are made again for their size. Without it the settle kept the plan it made on an
 * empty `operations` table, a sequential scan of it per batch: 45,000 scans reading 1.2 billion rows
 * over this file, whose forwards slowed from ~300 to ~40 events/s as the table grew.
 */
let lastAnalyzeAt = 0
async function analyzeEvery5s(): Promise<void> {
  if (Date.now() - lastAnalyzeAt < 5000) return
  lastAnalyzeAt = Date.now()
  await service.database.sql`analyze operations, operation_attempts, inbound_events, event_replays`
}

/** Waits until every event of `source` is DONE, then checks the destination got each exactly once. */
async function expectEachForwardedOnce(source: string, count: number): Promise<void> {
  await expect
    .poll(
      async () => {
        await analyzeEvery5s()
        return statusCounts(service.database.sql, source)
      },
      { timeout: 600_000, interval: 1000 },
    )
    .toEqual({ done: count })
  const counts = countsById(sink.received.filter(({ body }) => body.includes(`"${source}_`)))
  expect(counts.size).toBe(count)
  const twice = [...counts].filter(([, n]) => n !== 1)
  expect(twice).toEqual([])
}

describe('bulk replay of FAILED events', () => {
  it('through the API: a dry run counts, cursor slices replay all, each event is forwarded once', async () => {
    await seedFailedEvents(service.database.sql, 'api', MANY)
    expect(await replayApi({ source: 'api', dryRun: true })).toEqual({
      status: 200,
      body: { dryRun: true, matched: MANY },
    })
    const rssBefore = process.memoryUsage().rss
    const started = performance.now()
    let cursor: unknown
    let replayed = 0
    let calls = 0
    do {
      const { status, body } = await replayApi({ source: 'api', limit: 5000, ...(cursor ? { cursor } : {}) })
      expect(status).toBe(200)
      expect(body.queued).toBe(true)
      replayed += Number(body.replayed)
      cursor = body.cursor
      calls += 1
    } while (cursor !== null && calls < 10)
    const replayMs = performance.now() - started
    expect(replayed).toBe(MANY)
    await expectEachForwardedOnce('api', MANY)
    const totalMs = performance.now() - started
    console.info(
      `API: ${MANY} replayed in ${Math.round(replayMs)} ms (${calls} calls), all forwarded after ${Math.round(totalMs)} ms; test process RSS ${Math.round(rssBefore / 2 ** 20)} → ${Math.round(process.memoryUsage().rss / 2 ** 20)} MiB`,
    )
    // Settled: a second replay of the same filter finds nothing FAILED and sends nothing.
    expect((await replayApi({ source: 'api' })).body).toMatchObject({ replayed: 0, cursor: null })
  }, 700_000)

  it('through the CLI: each event forwarded once, peak RSS the same for 2,000 and 20,000', async () => {
    await seedFailedEvents(service.database.sql, 'few', FEW)
    await seedFailedEvents(service.database.sql, 'cli', MANY)
    const few = await runCli(
      ['events', 'replay', '--status', 'failed', '--source', 'few'],
      service.database.url,
      {
        rssFile: join(directory, 'rss-few'),
      },
    )
    expect(few.stdout).toMatch(/^replayed 2000 FAILED events in [\d.]+ s/)
    const started = performance.now()
    const many = await runCli(['events', 'replay', '--source', 'cli'], service.database.url, {
      rssFile: join(directory, 'rss-many'),
    })
    const replayMs = performance.now() - started
    expect(many.status, many.stderr).toBe(0)
    // Not a TTY: one summary line and no progress bar.
    expect(many.stdout).toMatch(
      /^replayed 20000 FAILED events in [\d.]+ s; the running service's relay enqueues them\n$/,
    )
    expect(many.stderr).toBe('')
    console.info(
      `CLI: ${MANY} replayed in ${Math.round(replayMs)} ms (the whole process; ${many.stdout.trim()}); peak RSS ${few.peakRssMb?.toFixed(1)} MiB for ${FEW}, ${many.peakRssMb?.toFixed(1)} MiB for ${MANY}`,
    )
    expect(many.peakRssMb).toBeDefined()
    expect(few.peakRssMb).toBeDefined()
    // Ten times the rows, the same memory: one chunk of ids at a time (a margin for the GC's timing).
    expect(many.peakRssMb ?? 0).toBeLessThan((few.peakRssMb ?? 0) + 15)
    expect(many.peakRssMb ?? 0).toBeLessThan(150)
    await expectEachForwardedOnce('few', FEW)
    await expectEachForwardedOnce('cli', MANY)
    console.info(`CLI: all forwarded ${Math.round(performance.now() - started)} ms after the replay started`)
  }, 800_000)

  it('resumes after an interrupt (SIGINT, then SIGKILL): every event forwarded once in total', async () => {
    await seedFailedEvents(service.database.sql, 'cut', CUT)
    const replays = async () =>
      Number(
        (
          await service.database
            .sql`select count(*)::int as n from event_replays r join inbound_events e on e.id = r.event_row_id where e.source = 'cut'`
        )[0]?.n,
      )
    const interruptAfter =
      (signal: NodeJS.Signals, rows: number) => (child: { kill(s: NodeJS.Signals): boolean }) => {
        let sent = false
        const poll = setInterval(async () => {
          // Checked after the await: checks under way together must not each send one (a second
          // SIGINT makes the CLI leave at once, without its report).
          if ((await replays()) >= rows && !sent) {
            sent = true
            clearInterval(poll)
            child.kill(signal)
          }
        }, 10)
        return () => clearInterval(poll)
      }
    const first = await runCli(['events', 'replay', '--source', 'cut'], service.database.url, {
      onSpawn: interruptAfter('SIGINT', 2000),
    })
    expect(first.status, first.stderr).toBe(130)
    expect(first.stdout).toMatch(
      /^interrupted: replayed \d+ of 10000 in [\d.]+ s; run the same command again/,
    )
    const afterFirst = await replays()
    expect(afterFirst).toBeLessThan(CUT)
    const second = await runCli(['events', 'replay', '--source', 'cut'], service.database.url, {
      // One chunk past the first run's rows: the CLI commits a chunk every few ms when the machine is
      // idle, and the poll sees the count late (9,000 of 10,000 at +3,000 once), so it must not wait
      // long for the rows it kills after.
      onSpawn: interruptAfter('SIGKILL', afterFirst + 1000),
    })
    expect(second.signal, second.stderr).toBe('SIGKILL')
    const afterSecond = await replays()
    expect(afterSecond).toBeLessThan(CUT)
    const third = await runCli(['events', 'replay', '--source', 'cut'], service.database.url)
    expect(third.status, third.stderr).toBe(0)
    await expectEachForwardedOnce('cut', CUT)
    // Each row replayed once: no run met a row an earlier one had already put back to PENDING or DONE.
    expect(await replays()).toBe(CUT)
    console.info(
      `interrupt: ${afterFirst} replayed before SIGINT, ${afterSecond} before SIGKILL; ${third.stdout.trim()}`,
    )
  }, 800_000)
})
