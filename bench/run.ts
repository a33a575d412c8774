// `npm run bench`: two sections, each with its baseline measured in the same run.
//   intake: signed requests with unique ids through the full path (a worker in the same process
//           forwarding every event to a local destination) against a bare Hono route that only
//           reads the body; then how long the forwards lag behind the end of the load.
//   drain:  a backlog taken by an api-only process, drained by one worker process, against the
//           hand-written at-least-once BullMQ worker in bench/baseline-worker.ts.
// BENCH_CONCURRENCY=32,96 runs the drain once per value (events in flight, in both workers).
// BENCH_PREFILL=N first fills each ledger with N DONE events (generate_series, not HTTP), to show
// the cost as the ledger grows. Every load is bounded in count and time; all traffic stays on 127.0.0.1.
import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Queue } from 'bullmq'
import postgres from 'postgres'
import { migrateLedger } from '../src/db/migrate.js'
import { createLogger } from '../src/logger.js'
import { type Child, startChild } from '../test/support/child.js'
import { adminDatabaseUrl, testRedisUrl } from '../test/support/env.js'
import { createBaselineTable } from './baseline-forwarder.js'
import { type Destination, startDestination } from './destination.js'
import { type DrainPair, type DrainResult, drainRatio, profileFlags, runDrain } from './drain.js'
import { BENCH_SECRET, signedRequest } from './signing.js'

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50)
const DRAIN_EVENTS = Number(process.env.BENCH_EVENTS ?? 3000)
// Events in flight per drain worker, both of them; several values give one table each.
const DRAIN_CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '32').split(',').map(Number)
// Timed pairs per concurrency (hookledger and the baseline, alternating which goes first).
const DRAIN_ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4)
const PREFILL = Number(process.env.BENCH_PREFILL ?? 0)
const SECTIONS = new Set((process.env.BENCH_SECTIONS ?? 'intake,drain').split(','))

async function load(url: string) {
  const result = await autocannon({
    url: `${url}/webhooks/bench`,
    connections: CONNECTIONS,
    duration: DURATION_S,
    requests: [{ setupRequest: (request) => ({ ...request, ...signedRequest() }) }],
  })
  return {
    requestsPerSecond: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    accepted: result['2xx'],
    startedAt: result.start.getTime(),
  }
}

/** One way of running hookledger: its environment. */
interface Variant {
  /** Names its CPU profile's folder (BENCH_CPU_PROF). */
  name: string
  label: string
  env: Record<string, string>
  /** `api`: the receive path alone, no worker in the process. */
  role?: 'api'
}

interface FullResult {
  load: Awaited<ReturnType<typeof load>>
  /** False for a receiver without a worker: nothing is forwarded, so nothing below is measured. */
  forwarding: boolean
  /** From the end of the load to the last forward arriving at the destination. */
  lagSeconds: number | undefined
  /**
   * Accepted events per second from the load's start to the last forward's arrival: what a receiver
   * sustains, since one that lets its forwards fall behind accepts more while the load lasts.
   */
  deliveredPerSecond: number | undefined
  repeats: number
}

/**
 * Loads a receiver once it is up, then, when it forwards, waits for every accepted event to arrive
 * at the destination.
 */
async function runFull(
  start: () => Promise<Child>,
  destination: Destination,
  forwarding: boolean,
): Promise<FullResult> {
  const full = await start()
  try {
    destination.reset()
    const result = await load(full.url)
    const loadEnded = Date.now()
    // Nothing forwarded (no worker), or not every forward arrived in time.
    const unmeasured = (repeats: number): FullResult => ({
      load: result,
      forwarding,
      lagSeconds: undefined,
      deliveredPerSecond: undefined,
      repeats,
    })
    if (!forwarding) return unmeasured(0)
    try {
      const { lastAt } = await destination.waitFor(result.accepted, 120_000)
      return {
        load: result,
        forwarding,
        lagSeconds: Math.max(0, lastAt - loadEnded) / 1000,
        deliveredPerSecond: (result.accepted * 1000) / Math.max(lastAt - result.startedAt, 1),
        repeats: destination.repeats(),
      }
    } catch {
      return unmeasured(destination.repeats())
    }
  } finally {
    await full.kill('SIGTERM')
  }
}

/**
 * The receiver a team would write by hand (bench/baseline-receiver.ts) on its own database and queue
 * prefix: what the full path's price for its guarantees is measured against. Without `forwarding`,
 * its worker does not start: the receive path alone.
 */
async function runHandWritten(
  options: { run: string; databaseUrl: string; admin: postgres.Sql; databaseName: string },
  destination: Destination,
  forwarding: boolean,
): Promise<FullResult> {
  await options.admin.unsafe(`create database "${options.databaseName}"`)
  const ledger = postgres(options.databaseUrl, { max: 1, onnotice: () => {} })
  const prefix = `hl-bench-${options.run}-receiver${forwarding ? '' : '-alone'}`
  try {
    await createBaselineTable(ledger)
    // Its dedup: `insert … on conflict (event_id) do nothing` needs the event id unique.
    await ledger`create unique index baseline_events_event_id on baseline_events (event_id)`
    return await runFull(
      () =>
        startChild(
          [
            ...profileFlags(`receiver${forwarding ? '' : '-alone'}`),
            '--import',
            'tsx',
            'bench/baseline-receiver.ts',
          ],
          {
            DATABASE_URL: options.databaseUrl,
            BASELINE_FORWARDING: forwarding ? 'on' : 'off',
            REDIS_URL: testRedisUrl(),
            BASELINE_PREFIX: prefix,
            BASELINE_QUEUE: 'baseline',
            BASELINE_SECRET: BENCH_SECRET,
            BASELINE_DESTINATION: destination.url,
            BASELINE_CONCURRENCY: '32',
          },
        ),
      destination,
      forwarding,
    )
  } finally {
    const queue = new Queue('baseline', { connection: { url: testRedisUrl() }, prefix })
    await queue.obliterate({ force: true }).catch(() => {})
    await queue.close()
    await ledger.end()
  }
}

/** Creates the ledger, with N DONE events written straight into it, as months of traffic would leave them. */
async function prepareLedger(url: string, events: number): Promise<void> {
  await migrateLedger(url, createLogger('warn'))
  if (events === 0) return
  const ledger = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await ledger`
      insert into inbound_events (source, event_id, event_type, payload_hash, body, headers, status,
                                  attempts, received_at, enqueued_at, processed_at)
      select 'bench', 'msg_prefill_' || g, 'invoice.paid', md5(g::text), convert_to('{"prefill":' || g || '}', 'UTF8'),
             '{}'::jsonb, 'done', 1, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
      from generate_series(1, ${events}) g`
    await ledger`vacuum analyze inbound_events`
    // The fill's own WAL is flushed now, so the checkpoint it causes is not billed to what follows.
    await ledger`checkpoint`
  } finally {
    await ledger.end()
  }
}

function intakeTable(
  bare: Awaited<ReturnType<typeof load>>,
  handWritten: { forwarding: FullResult; alone: FullResult },
  rows: { name: string; label: string; result: FullResult }[],
) {
  const row = (label: string, r: FullResult) => {
    const lag = !r.forwarding
      ? '–'
      : r.lagSeconds === undefined
        ? 'not within 120 s'
        : `${r.lagSeconds.toFixed(1)} s${r.repeats > 0 ? `, ${r.repeats} repeats` : ''}`
    const delivered = r.deliveredPerSecond === undefined ? '–' : r.deliveredPerSecond.toFixed(0)
    return `| ${label} | ${r.load.requestsPerSecond.toFixed(0)} | ${r.load.p50} | ${r.load.p99} | ${r.load.non2xx} | ${r.load.errors} | ${lag} | ${delivered} |`
  }
  const full = rows.find((r) => r.name === 'redis')?.result
  const alone = rows.find((r) => r.name === 'api')?.result
  const ratio = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? '–' : (a / b).toFixed(2)
  return [
    '| path | requests/s | p50 ms | p99 ms | non-2xx | errors | forwards done after the load | delivered/s, load start to last forward |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    `| bare Hono route (reads the body) | ${bare.requestsPerSecond.toFixed(0)} | ${bare.p50} | ${bare.p99} | ${bare.non2xx} | ${bare.errors} | – | – |`,
    row(
      'hand-written receiver (verify, insert, enqueue; BullMQ worker forwarding in the same process; bench/baseline-receiver.ts)',
      handWritten.forwarding,
    ),
    row('the same, receiving only (no worker)', handWritten.alone),
    ...rows.map(({ label, result }) => row(label, result)),
    '',
    `intake ratio full/bare (requests/s): ${ratio(full?.load.requestsPerSecond, bare.requestsPerSecond)}`,
    `intake ratio full/hand-written (requests/s): ${ratio(full?.load.requestsPerSecond, handWritten.forwarding.load.requestsPerSecond)}; ` +
      `delivered/s: ${ratio(full?.deliveredPerSecond, handWritten.forwarding.deliveredPerSecond)}; ` +
      `receiving only: ${ratio(alone?.load.requestsPerSecond, handWritten.alone.load.requestsPerSecond)}`,
  ]
}

function drainTable(results: { middle: DrainPair; rounds: DrainPair[] }) {
  const { middle, rounds } = results
  const row = (r: DrainResult) =>
    `| ${r.label} | ${r.perSecond.toFixed(0)} | ${(r.startToLastMs / 1000).toFixed(1)} | ${r.cpuMsPerEvent.toFixed(2)} | ${r.storesCpuMsPerEvent.toFixed(2)} | ${r.machineBusyPercent.toFixed(0)} | ${r.statementsPerEvent?.toFixed(1) ?? '–'} | ${r.commitsPerEvent.toFixed(2)} | ${(r.walBytesPerEvent / 1024).toFixed(1)} | ${r.jobsPerEvent.toFixed(2)} | ${r.repeats} |`
  return [
    `| worker (${middle.hookledger.events} forward events, the middle round) | events/s | s from spawn to last | worker CPU ms/event | PostgreSQL + Redis CPU ms/event | machine busy % | SQL statements/event | commits/event | WAL KB/event | queue jobs/event | repeats |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    row(middle.baseline),
    row(middle.hookledger),
    '',
    `drain ratio hookledger/baseline (events/s), middle of ${rounds.length} rounds: ${drainRatio(middle).toFixed(2)}` +
      ` (by round: ${rounds.map((pair) => drainRatio(pair).toFixed(2)).join(', ')})`,
  ]
}

async function main() {
  const run = randomBytes(4).toString('hex')
  const databaseName = (suffix: string) => `hl_bench_${run}_${suffix}`
  const databaseUrl = (suffix: string) => {
    const url = new URL(adminDatabaseUrl())
    url.pathname = `/${databaseName(suffix)}`
    return url.toString()
  }
  const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
  const destination = await startDestination()
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-'))
  chmodSync(dataDir, 0o755) // reachable by the `postgres` user when the bench runs as root
  const lines = [
    `hookledger bench — ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown CPU'}), Node ${process.version}` +
      (PREFILL > 0 ? `, ledger prefilled with ${PREFILL} DONE events` : ', empty ledger'),
    '',
  ]
  let failed = false
  try {
    if (SECTIONS.has('intake')) {
      // In the run's own folder, removed with it at the end.
      const configPath = join(dataDir, 'config.json')
      writeFileSync(
        configPath,
        JSON.stringify({
          sources: [
            {
              id: 'bench',
              verify: { scheme: 'standard-webhooks', secrets: [BENCH_SECRET] },
              handler: { type: 'forward', url: destination.url },
            },
          ],
          worker: { concurrency: 32 },
        }),
      )
      const variants: Variant[] = [
        {
          name: 'redis',
          label: 'full path (verify, claim, commit, enqueue; worker forwarding in the same process)',
          env: { DATABASE_URL: databaseUrl('redis'), REDIS_URL: testRedisUrl() },
        },
        {
          name: 'api',
          label: 'the same, receiving only (`serve --role api`, no worker)',
          env: { DATABASE_URL: databaseUrl('api'), REDIS_URL: testRedisUrl() },
          role: 'api',
        },
        {
          name: 'in-process',
          label: 'the same on the in-process queue (REDIS_URL unset)',
          env: { DATABASE_URL: databaseUrl('inproc'), REDIS_URL: '' },
        },
        {
          name: 'embedded',
          label: 'embedded mode: its own PostgreSQL and the in-process queue (both unset, as `npm start`)',
          env: { DATABASE_URL: '', REDIS_URL: '', HOOKLEDGER_DATA_DIR: join(dataDir, 'data') },
        },
      ]
      for (const suffix of ['redis', 'api', 'inproc']) await prepareLedger(databaseUrl(suffix), PREFILL)
      const bare = await startChild(['--import', 'tsx', 'bench/bare-server.ts'], {})
      const bareResult = await load(bare.url)
      await bare.kill('SIGTERM')
      const handWritten = {
        forwarding: await runHandWritten(
          { run, databaseUrl: databaseUrl('hand'), admin, databaseName: databaseName('hand') },
          destination,
          true,
        ),
        alone: await runHandWritten(
          { run, databaseUrl: databaseUrl('handalone'), admin, databaseName: databaseName('handalone') },
          destination,
          false,
        ),
      }
      const rows: { name: string; label: string; result: FullResult }[] = []
      for (const variant of variants) {
        const forwarding = variant.role !== 'api'
        const result = await runFull(
          () =>
            startChild(
              [
                ...profileFlags(`full-${variant.name}`),
                'bin/hookledger.js',
                'serve',
                ...(forwarding ? [] : ['--role', 'api']),
              ],
              { ...variant.env, HOOKLEDGER_CONFIG: configPath, LOG_LEVEL: 'warn' },
            ),
          destination,
          forwarding,
        )
        rows.push({ name: variant.name, label: variant.label, result })
      }
      for (const result of [handWritten.forwarding, handWritten.alone, ...rows.map((r) => r.result)]) {
        const { non2xx, errors } = result.load
        failed ||= non2xx > 0 || errors > 0 || (result.forwarding && result.lagSeconds === undefined)
      }
      lines.push(
        `### Intake: ${CONNECTIONS} connections, ${DURATION_S} s per run, ~1 KB signed bodies, unique ids`,
        '',
        ...intakeTable(bareResult, handWritten, rows),
        '',
      )
    }
    if (SECTIONS.has('drain')) {
      await prepareLedger(databaseUrl('drain'), PREFILL)
      for (const concurrency of DRAIN_CONCURRENCY) {
        const results = await runDrain({
          run,
          folder: dataDir,
          events: DRAIN_EVENTS,
          concurrency,
          databaseUrl: databaseUrl('drain'),
          databaseName: databaseName('drain'),
          admin,
          destination,
          rounds: DRAIN_ROUNDS,
        })
        failed ||= results.rounds.some((pair) => pair.hookledger.repeats > 0)
        lines.push(
          `### Drain: a backlog of ${DRAIN_EVENTS} forward events, one worker process, concurrency ${concurrency}`,
          '',
          ...drainTable(results),
          '',
        )
      }
    }
    process.stdout.write(`${lines.join('\n')}\n`)
    if (failed) process.exitCode = 1
  } finally {
    for (const suffix of ['redis', 'api', 'inproc', 'hand', 'handalone', 'drain']) {
      await admin.unsafe(`drop database if exists "${databaseName(suffix)}" with (force)`)
    }
    await admin.end()
    await destination.close()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

await main()
