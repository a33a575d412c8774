// `npm run bench`: three sections, each with its baseline measured in the same run, on equal terms:
// the hand-written baselines send through hookledger's own transport with the pool size hookledger
// would open (bench/baseline-forwarder.ts).
//   intake:  signed requests with unique ids through the whole system (a worker in the same process
//            forwarding every event to a local destination), hookledger against the hand-written
//            receiver + worker (BENCH_ROUNDS alternating pairs, 3) and a bare Hono route; each run
//            lasts until every accepted event was forwarded.
//   drain:   a backlog taken by an api-only process, drained by one worker process, against the
//            hand-written at-least-once BullMQ worker in bench/baseline-worker.ts; paired rounds.
//   trickle: a steady low rate into each whole system: receive-to-forward latency, CPU per event.
// Each prints what the systems cost PostgreSQL per event (rows, commits, WAL; bench/ledger-cost.ts).
//   scale:   the partitioned ledger at scale (bench/ledger-at-scale.ts): BENCH_SCALE_ROWS DONE events
//            (default 20,000,000; QUICK 200,000) filled by SQL over 10 daily periods, the oldest alone
//            past retentionDays 30, each with its dedup key, payload and attempt. On it and on an
//            empty ledger, the intake (`serve` under autocannon) and a drain (one worker process), in
//            BENCH_SCALE_ROUNDS alternating pairs (3; QUICK 1);
//            then one retention pass (startRetention().sweep()): its time, rows removed, dead tuples
//            left; the same expired day removed from a ledger migrated only up to 0017 by the
//            row-by-row pass of before 0018, reproduced in SQL (BENCH_SCALE_OLD_DAYS days of rows,
//            default 3: the expired one and two younger); and the intake's p99 while a pass drops
//            the day (filled again) against the same load without it. Its targets: intake and drain
//            within 10 % of the empty ledger's, the pass under 1 s leaving 0 dead tuples, the p99
//            under the pass within 20 %. At the default size it fills ~20 M rows: about 45 GB of
//            disk at its peak and a long fill (the section prints an estimate from its own rate).
// BENCH_QUICK=1 runs every section small (a smoke check, not figures). BENCH_PREFILL=N first fills
// each ledger with N DONE events (generate_series, not HTTP), to show the cost as the ledger grows.
// Every load is bounded in count and time; all traffic stays on 127.0.0.1.
import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Queue } from 'bullmq'
import postgres from 'postgres'
import { migrateLedger } from '../src/db/migrate.js'
import { createLogger } from '../src/logger.js'
import { type Child, startChild } from '../test/support/child.js'
import { adminDatabaseUrl, testRedisUrl } from '../test/support/env.js'
import { addPastPeriods } from '../test/support/periods.js'
import { createBaselineTable } from './baseline-forwarder.js'
import { type SystemCpuPerEvent, startSystemCpu } from './cpu.js'
import { type Destination, startDestination } from './destination.js'
import { type DrainPair, type DrainResult, drainRatio, profileFlags, runDrain } from './drain.js'
import { runLedgerAtScale } from './ledger-at-scale.js'
import { costTable, eventsStored, type LedgerCost, startLedgerCost } from './ledger-cost.js'
import { BENCH_SECRET, DRAIN_BODY_BYTES, SMALL_BODY_BYTES, signedRequest } from './signing.js'
import { runTrickle, type TrickleResult } from './trickle.js'

const QUICK = process.env.BENCH_QUICK === '1'
const numbers = (value: string) => value.split(',').map(Number)
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? (QUICK ? 2 : 10))
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32)
// Backlog sizes of the drain, one table per size and concurrency.
const DRAIN_EVENTS = numbers(process.env.BENCH_EVENTS ?? (QUICK ? '300' : '3000,10000'))
// Events in flight per drain worker, both of them.
const DRAIN_CONCURRENCY = numbers(process.env.BENCH_CONCURRENCY ?? (QUICK ? '32' : '32,96'))
// Timed pairs per size and concurrency (hookledger and the baseline, alternating which goes first).
/** Timed pairs of the intake's ratio, and of each drain size and concurrency. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3))
const TRICKLE_RATE = Number(process.env.BENCH_TRICKLE_RATE ?? 200)
const TRICKLE_S = Number(process.env.BENCH_TRICKLE_S ?? (QUICK ? 2 : 20))
const PREFILL = Number(process.env.BENCH_PREFILL ?? 0)
const SECTIONS = new Set((process.env.BENCH_SECTIONS ?? 'intake,drain,trickle,scale').split(','))
const SCALE_DEFAULT_ROWS = 20_000_000
const SCALE_ROWS = Number(process.env.BENCH_SCALE_ROWS ?? (QUICK ? 200_000 : SCALE_DEFAULT_ROWS))
const SCALE_OLD_DAYS = Number(process.env.BENCH_SCALE_OLD_DAYS ?? 3)
const SCALE_ROUNDS = Number(process.env.BENCH_SCALE_ROUNDS ?? (QUICK ? 1 : 3))
/** The whole systems' worker concurrency (hookledger's worker.concurrency, the hand-written worker's). */
const SYSTEM_CONCURRENCY = 32

async function load(url: string, seconds = DURATION_S) {
  const result = await autocannon({
    url: `${url}/webhooks/bench`,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [
      { setupRequest: (request) => ({ ...request, ...signedRequest({ bytes: SMALL_BODY_BYTES }) }) },
    ],
  })
  return {
    requestsPerSecond: result.requests.average,
    acceptedPerSecond: result['2xx'] / Math.max(result.duration, 0.001),
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
  /** What the run cost the system's database (forwarding runs on a database of their own). */
  cost?: LedgerCost
  /**
   * CPU per accepted event from the load's start to the last forward (or the load's end): the
   * system's process, its database's PostgreSQL backends (none for embedded mode, whose server is
   * its own), redis-server (the whole server), and the machine's two cores (the load generator and
   * the destination included), busy %.
   */
  cpu: SystemCpuPerEvent
}

/**
 * Loads a receiver once it is up, then, when it forwards, waits for every accepted event to arrive
 * at the destination. With `databaseUrl` (a database of the system's own), what the run cost it.
 */
async function runFull(
  start: () => Promise<Child>,
  destination: Destination,
  forwarding: boolean,
  options: { databaseUrl?: string; backends?: { admin: postgres.Sql; databaseName: string } } = {},
): Promise<FullResult> {
  const full = await start()
  const meter = options.databaseUrl === undefined ? undefined : await startLedgerCost(options.databaseUrl)
  let result: FullResult | undefined
  try {
    destination.reset()
    const cpu = await startSystemCpu(full.process.pid, options.backends)
    const load_ = await load(full.url)
    const loadEnded = Date.now()
    let lagSeconds: number | undefined
    let deliveredPerSecond: number | undefined
    if (forwarding) {
      try {
        const { lastAt } = await destination.waitFor(load_.accepted, 120_000)
        lagSeconds = Math.max(0, lastAt - loadEnded) / 1000
        deliveredPerSecond = (load_.accepted * 1000) / Math.max(lastAt - load_.startedAt, 1)
      } catch {
        // Not every forward arrived in time: nothing below the load is measured.
      }
    }
    result = {
      load: load_,
      forwarding,
      lagSeconds,
      deliveredPerSecond,
      repeats: forwarding ? destination.repeats() : 0,
      cpu: await cpu.stop(load_.accepted),
    }
  } finally {
    await full.kill('SIGTERM')
  }
  if (meter !== undefined) {
    // Backends report their counts when they exit; give them a moment to.
    await new Promise((resolve) => setTimeout(resolve, 1200))
    result.cost = await meter.stop()
  }
  return result
}

interface SystemDatabase {
  run: string
  /** Names the queue prefix and the CPU profile's folder (BENCH_CPU_PROF). */
  name: string
  databaseUrl: string
  databaseName: string
  admin: postgres.Sql
}

/**
 * The receiver a team would write by hand (bench/baseline-receiver.ts) on its own database and queue
 * prefix: what hookledger's price for its guarantees is measured against. `use` starts it. Without
 * `forwarding`, its worker does not start: the receive path alone.
 */
async function withHandWritten<T>(
  options: SystemDatabase,
  destination: Destination,
  forwarding: boolean,
  use: (start: () => Promise<Child>) => Promise<T>,
): Promise<T> {
  await options.admin.unsafe(`create database "${options.databaseName}"`)
  const ledger = postgres(options.databaseUrl, { max: 1, onnotice: () => {} })
  const prefix = `hl-bench-${options.run}-${options.name}`
  try {
    await createBaselineTable(ledger)
    // Its dedup: `insert … on conflict (source, event_id) do nothing` needs the pair unique.
    await ledger`create unique index baseline_events_source_event_id on baseline_events (source, event_id)`
    return await use(() =>
      startChild([...profileFlags(options.name), '--import', 'tsx', 'bench/baseline-receiver.ts'], {
        DATABASE_URL: options.databaseUrl,
        BASELINE_FORWARDING: forwarding ? 'on' : 'off',
        REDIS_URL: testRedisUrl(),
        BASELINE_PREFIX: prefix,
        BASELINE_QUEUE: 'baseline',
        BASELINE_SECRET: BENCH_SECRET,
        BASELINE_DESTINATION: destination.url,
        BASELINE_CONCURRENCY: String(SYSTEM_CONCURRENCY),
      }),
    )
  } finally {
    const queue = new Queue('baseline', { connection: { url: testRedisUrl() }, prefix })
    await queue.obliterate({ force: true }).catch(() => {})
    await queue.close()
    await ledger.end()
  }
}

/**
 * Creates the ledger, with N DONE events written straight into it, as months of traffic would leave
 * them: received a day ago, under ids of that time (version 7) in yesterday's period, each with its
 * dedup key in the current key generation.
 */
async function prepareLedger(url: string, events: number): Promise<void> {
  await migrateLedger(url, createLogger('warn'))
  if (events === 0) return
  const ledger = postgres(url, { max: 1, onnotice: () => {} })
  try {
    // The migration makes today's period and the two ahead; a day ago is yesterday's.
    await addPastPeriods(ledger, { daysAgo: [1] })
    await ledger`
      with inserted as (
        insert into inbound_events (id, source, event_id, event_type, payload_hash, headers, status, attempts,
                                    received_at, enqueued_at, processed_at)
        select hookledger_uuid_v7(t.at), 'bench', 'msg_prefill_' || g, 'invoice.paid', md5(g::text),
               '{}'::jsonb, 'done', 1, t.at, t.at, t.at
        from (select now() - interval '1 day' as at) t, generate_series(1, ${events}) g
        returning id, event_id)
      insert into inbound_event_payloads (event_row_id, body)
      select id, convert_to('{"prefill":' || substr(event_id, 13) || '}', 'UTF8') from inserted`
    await ledger`
      insert into inbound_event_keys (generation, source, event_id, body_key, event_row_id, payload_hash, origin)
      select (select max(starts) from inbound_key_generations where starts <= now()), source, event_id,
             body_key, id, payload_hash, origin
      from inbound_events where event_id like 'msg_prefill_%'`
    await ledger`vacuum analyze`
    // The fill's own WAL is flushed now, so the checkpoint it causes is not billed to what follows.
    await ledger`checkpoint`
  } finally {
    await ledger.end()
  }
}

/** One round of the intake's ratio: the hand-written receiver + worker and `serve`, one after the other. */
interface IntakePair {
  handWritten: FullResult
  hookledger: FullResult
}

const deliveredRatio = (pair: IntakePair) =>
  (pair.hookledger.deliveredPerSecond ?? 0) / Math.max(pair.handWritten.deliveredPerSecond ?? 0, 1)

function intakeTable(
  bare: Awaited<ReturnType<typeof load>>,
  paired: { middle: IntakePair; pairs: IntakePair[]; handWrittenAlone: FullResult },
  rows: { name: string; label: string; result: FullResult }[],
) {
  const { middle, pairs, handWrittenAlone } = paired
  const cpu = (r: FullResult) => {
    const { processMs, postgresMs, redisMs, machineBusyPercent } = r.cpu
    return `${processMs.toFixed(2)} | ${postgresMs?.toFixed(2) ?? '–'} | ${redisMs.toFixed(2)} | ${machineBusyPercent.toFixed(0)}`
  }
  const row = (label: string, r: FullResult) => {
    const lag = !r.forwarding
      ? '–'
      : r.lagSeconds === undefined
        ? 'not within 120 s'
        : `${r.lagSeconds.toFixed(1)} s${r.repeats > 0 ? `, ${r.repeats} repeats` : ''}`
    const delivered = r.deliveredPerSecond === undefined ? '–' : r.deliveredPerSecond.toFixed(0)
    return `| ${label} | ${r.load.acceptedPerSecond.toFixed(0)} | ${r.load.p50} | ${r.load.p99} | ${r.load.non2xx} | ${r.load.errors} | ${lag} | ${delivered} | ${cpu(r)} |`
  }
  const alone = rows.find((r) => r.name === 'api')?.result
  const ratio = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? '–' : (a / b).toFixed(2)
  const total = (r: FullResult) =>
    `${r.cpu.processMs.toFixed(2)}+${r.cpu.postgresMs?.toFixed(2) ?? '–'}+${r.cpu.redisMs.toFixed(2)}`
  const rate = (r: FullResult) =>
    `${r.load.acceptedPerSecond.toFixed(0)} / ${r.deliveredPerSecond?.toFixed(0) ?? '–'}`
  return [
    '| path | accepted/s | p50 ms | p99 ms | non-2xx | errors | forwards done after the load | delivered/s, load start to last forward | process CPU ms/event | PostgreSQL CPU ms/event (its backends) | Redis CPU ms/event (whole server) | machine busy % |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    `| bare Hono route (reads the body; the HTTP ceiling) | ${bare.acceptedPerSecond.toFixed(0)} | ${bare.p50} | ${bare.p99} | ${bare.non2xx} | ${bare.errors} | – | – | – | – | – | – |`,
    row(
      'hand-written receiver + worker in one process (verify, insert, enqueue; bench/baseline-receiver.ts), the median pair',
      middle.handWritten,
    ),
    row('the same, receiving only (no worker)', handWrittenAlone),
    row(
      'hookledger, api and worker in one process (`serve`: verify, claim, commit, enqueue; forward), the median pair',
      middle.hookledger,
    ),
    ...rows.map(({ label, result }) => row(label, result)),
    '',
    `intake ratio hookledger/hand-written, delivered/s, median of ${pairs.length} pairs: ${deliveredRatio(middle).toFixed(2)}; ` +
      `accepted/s in that pair: ${ratio(middle.hookledger.load.acceptedPerSecond, middle.handWritten.load.acceptedPerSecond)}; ` +
      `receiving only, accepted/s: ${ratio(alone?.load.acceptedPerSecond, handWrittenAlone.load.acceptedPerSecond)}`,
    `intake ratio hookledger/bare route, accepted/s: ${ratio(middle.hookledger.load.acceptedPerSecond, bare.acceptedPerSecond)}`,
    '',
    '| pair | first | hookledger accepted/s / delivered/s | hand-written accepted/s / delivered/s | delivered ratio | hookledger CPU ms/event, process+PostgreSQL+Redis | hand-written CPU ms/event, process+PostgreSQL+Redis |',
    '|---:|---|---:|---:|---:|---:|---:|',
    ...pairs.map(
      (pair, i) =>
        `| ${i + 1} | ${i % 2 === 0 ? 'hand-written' : 'hookledger'} | ${rate(pair.hookledger)} | ${rate(pair.handWritten)} | ${deliveredRatio(pair).toFixed(2)} | ${total(pair.hookledger)} | ${total(pair.handWritten)} |`,
    ),
  ]
}

function drainTable(results: { middle: DrainPair; rounds: DrainPair[] }) {
  const { middle, rounds } = results
  const row = (r: DrainResult) =>
    `| ${r.label} | ${r.perSecond.toFixed(0)} | ${(r.drainMs / 1000).toFixed(2)} | ${(r.startupMs / 1000).toFixed(2)} | ${r.cpuMsPerEvent.toFixed(2)} | ${r.postgresCpuMsPerEvent.toFixed(2)} | ${r.redisCpuMsPerEvent.toFixed(2)} | ${r.machineBusyPercent.toFixed(0)} | ${r.statementsPerEvent?.toFixed(1) ?? '–'} | ${r.jobsPerEvent.toFixed(2)} | ${r.repeats} |`
  const cpu = (r: DrainResult) => `${r.cpuMsPerEvent.toFixed(2)}+${r.postgresCpuMsPerEvent.toFixed(2)}`
  return [
    `| worker (the median pair) | events/s, first delivery to last | s, first to last | start-up s, spawn to first delivery | worker CPU ms/event | PostgreSQL CPU ms/event (its backends) | Redis CPU ms/event (whole server) | machine busy % | SQL statements/event | queue jobs/event | repeats |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    row(middle.baseline),
    row(middle.hookledger),
    '',
    `drain ratio hookledger/baseline (events/s), median of ${rounds.length} pairs: ${drainRatio(middle).toFixed(2)}`,
    '',
    '| pair | first | hookledger events/s | baseline events/s | ratio | hookledger CPU ms/event, worker+PostgreSQL | baseline CPU ms/event, worker+PostgreSQL |',
    '|---:|---|---:|---:|---:|---:|---:|',
    ...rounds.map(
      (pair, i) =>
        `| ${i + 1} | ${i % 2 === 0 ? 'baseline' : 'hookledger'} | ${pair.hookledger.perSecond.toFixed(0)} | ${pair.baseline.perSecond.toFixed(0)} | ${drainRatio(pair).toFixed(2)} | ${cpu(pair.hookledger)} | ${cpu(pair.baseline)} |`,
    ),
    '',
    ...costTable('worker (the median pair), per event delivered', [
      { label: middle.baseline.label, cost: middle.baseline.cost, events: middle.baseline.events },
      { label: middle.hookledger.label, cost: middle.hookledger.cost, events: middle.hookledger.events },
    ]),
    '',
    ...[middle.baseline, middle.hookledger].flatMap((r) => statementLines(r)),
  ]
}

/** The statements a worker ran per event (the proxy's smaller run), the most frequent first. */
function statementLines(r: DrainResult): string[] {
  if (r.statementsByText === undefined) return []
  const shown = (text: string) => (text.length > 160 ? `${text.slice(0, 157)}...` : text)
  return [
    `${r.label}, SQL statements per event by text:`,
    ...[...r.statementsByText]
      .filter(([, perEvent]) => perEvent >= 0.001)
      .sort((a, b) => b[1] - a[1])
      .map(([text, perEvent]) => `- ${perEvent.toFixed(3)}  \`${shown(text)}\``),
    '',
  ]
}

function trickleTable(rows: { label: string; result: TrickleResult }[]) {
  const ms = (value: number) => value.toFixed(1)
  return [
    '| system | sent/s | accepted | non-2xx | errors | p50 ms, send to forward | p99 ms | max ms | process CPU ms/event | PostgreSQL CPU ms/event (its backends) | Redis CPU ms/event (whole server) | repeats |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      ({ label, result: r }) =>
        `| ${label} | ${r.sentPerSecond.toFixed(0)} | ${r.accepted} | ${r.non2xx} | ${r.errors} | ${ms(r.p50Ms)} | ${ms(r.p99Ms)} | ${ms(r.maxMs)} | ${r.cpuMsPerEvent.toFixed(2)} | ${r.postgresCpuMsPerEvent.toFixed(2)} | ${r.redisCpuMsPerEvent.toFixed(2)} | ${r.repeats} |`,
    ),
    '',
    ...costTable('system, whole (receive and forward), per event accepted', [
      ...rows.map(({ label, result }) => ({ label, cost: result.cost, events: result.accepted })),
    ]),
  ]
}

const loadAverages = () =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ')

async function main() {
  const run = randomBytes(4).toString('hex')
  const databaseName = (suffix: string) => `hl_bench_${run}_${suffix}`
  const databaseUrl = (suffix: string) => {
    const url = new URL(adminDatabaseUrl())
    url.pathname = `/${databaseName(suffix)}`
    return url.toString()
  }
  const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
  const system = (name: string): SystemDatabase => ({
    run,
    name,
    databaseUrl: databaseUrl(name),
    databaseName: databaseName(name),
    admin,
  })
  const databases = new Set<string>()
  const destination = await startDestination()
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-'))
  chmodSync(dataDir, 0o755) // reachable by the `postgres` user when the bench runs as root
  // In the run's own folder, removed with it at the end: the whole system's config (intake, trickle).
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
      worker: { concurrency: SYSTEM_CONCURRENCY },
    }),
  )
  const hookledger = (name: string, env: Record<string, string>, role?: 'api') => () =>
    startChild(
      [...profileFlags(name), 'bin/hookledger.js', 'serve', ...(role === undefined ? [] : ['--role', role])],
      {
        ...env,
        HOOKLEDGER_CONFIG: configPath,
        LOG_LEVEL: 'warn',
      },
    )
  const lines = [
    `hookledger bench — ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown CPU'}), Node ${process.version}` +
      (PREFILL > 0 ? `, ledger prefilled with ${PREFILL} DONE events` : ', empty ledger') +
      (QUICK ? ', QUICK (a smoke check: too small for figures)' : ''),
    `load averages at the start: ${loadAverages()}`,
    '',
  ]
  let failed = false
  try {
    if (SECTIONS.has('intake')) {
      // The ratio's two systems run in pairs on fresh databases, alternating which goes first: one
      // hand-written run moved from 689 to 878 delivered/s between two runs of the bench.
      const pairs: IntakePair[] = []
      for (let round = 0; round < ROUNDS; round += 1) {
        const handName = `hand_${round}`
        const serveName = `redis_${round}`
        databases.add(handName).add(serveName)
        await prepareLedger(databaseUrl(serveName), PREFILL)
        const runHandWritten = () =>
          withHandWritten(system(handName), destination, true, (start) =>
            runFull(start, destination, true, {
              databaseUrl: databaseUrl(handName),
              backends: { admin, databaseName: databaseName(handName) },
            }),
          )
        const runServe = () =>
          runFull(
            hookledger(`full-redis-${round}`, {
              DATABASE_URL: databaseUrl(serveName),
              REDIS_URL: testRedisUrl(),
            }),
            destination,
            true,
            {
              databaseUrl: databaseUrl(serveName),
              backends: { admin, databaseName: databaseName(serveName) },
            },
          )
        if (round % 2 === 0) {
          const handWritten = await runHandWritten()
          pairs.push({ handWritten, hookledger: await runServe() })
        } else {
          const hookledgerResult = await runServe()
          pairs.push({ handWritten: await runHandWritten(), hookledger: hookledgerResult })
        }
      }
      const byRatio = [...pairs].sort((a, b) => deliveredRatio(a) - deliveredRatio(b))
      const middle = byRatio[Math.floor((byRatio.length - 1) / 2)]
      if (middle === undefined) throw new Error('the intake needs at least one round')
      const variants: Variant[] = [
        {
          name: 'api',
          label: 'the same, receiving only (`serve --role api`, no worker)',
          env: { DATABASE_URL: databaseUrl('api'), REDIS_URL: testRedisUrl() },
          role: 'api',
        },
        {
          name: 'inproc',
          label: 'the same on the in-process queue (REDIS_URL unset)',
          env: { DATABASE_URL: databaseUrl('inproc'), REDIS_URL: '' },
        },
        {
          name: 'embedded',
          label: 'embedded mode: its own PostgreSQL and the in-process queue (both unset, as `npm start`)',
          env: { DATABASE_URL: '', REDIS_URL: '', HOOKLEDGER_DATA_DIR: join(dataDir, 'data') },
        },
      ]
      for (const name of ['api', 'inproc']) {
        databases.add(name)
        await prepareLedger(databaseUrl(name), PREFILL)
      }
      const bare = await startChild(['--import', 'tsx', 'bench/bare-server.ts'], {})
      const bareResult = await load(bare.url)
      await bare.kill('SIGTERM')
      databases.add('handalone')
      const handWrittenAlone = await withHandWritten(system('handalone'), destination, false, (start) =>
        runFull(start, destination, false, {
          backends: { admin, databaseName: databaseName('handalone') },
        }),
      )
      const rows: { name: string; label: string; result: FullResult }[] = []
      for (const variant of variants) {
        const forwarding = variant.role !== 'api'
        const result = await runFull(
          hookledger(`full-${variant.name}`, variant.env, variant.role),
          destination,
          forwarding,
          variant.name === 'embedded'
            ? {}
            : { backends: { admin, databaseName: databaseName(variant.name) } },
        )
        rows.push({ name: variant.name, label: variant.label, result })
      }
      const everyRun = [
        ...pairs.flatMap((pair) => [pair.handWritten, pair.hookledger]),
        handWrittenAlone,
        ...rows.map((r) => r.result),
      ]
      for (const result of everyRun) {
        const { non2xx, errors } = result.load
        failed ||= non2xx > 0 || errors > 0 || (result.forwarding && result.lagSeconds === undefined)
      }
      lines.push(
        `### Intake: ${CONNECTIONS} connections, ${DURATION_S} s per run, ~${SMALL_BODY_BYTES} B signed bodies, unique ids`,
        '',
        ...intakeTable(bareResult, { middle, pairs, handWrittenAlone }, rows),
        '',
        ...costTable('whole system under the load (the median pair), per event stored', [
          ...(middle.handWritten.cost === undefined
            ? []
            : [
                {
                  label: 'hand-written receiver + worker',
                  cost: middle.handWritten.cost,
                  events: eventsStored(middle.handWritten.cost),
                },
              ]),
          ...(middle.hookledger.cost === undefined
            ? []
            : [
                {
                  label: 'hookledger `serve`',
                  cost: middle.hookledger.cost,
                  events: eventsStored(middle.hookledger.cost),
                },
              ]),
        ]),
        '',
        `load averages after the intake: ${loadAverages()}`,
        '',
      )
    }
    if (SECTIONS.has('drain')) {
      for (const events of DRAIN_EVENTS) {
        for (const concurrency of DRAIN_CONCURRENCY) {
          // A ledger of its own per backlog and concurrency: each starts where the others did.
          const name = `drain_${events}_c${concurrency}`
          databases.add(name)
          await prepareLedger(databaseUrl(name), PREFILL)
          const results = await runDrain({
            run,
            folder: dataDir,
            events,
            concurrency,
            databaseUrl: databaseUrl(name),
            databaseName: databaseName(name),
            admin,
            destination,
            rounds: ROUNDS,
          })
          await admin.unsafe(`drop database if exists "${databaseName(name)}" with (force)`)
          failed ||= results.rounds.some((pair) => pair.hookledger.repeats > 0)
          lines.push(
            `### Drain: a backlog of ${events} forward events (~${DRAIN_BODY_BYTES} B bodies), one worker process, concurrency ${concurrency}`,
            '',
            ...drainTable(results),
            '',
            `load averages after this drain: ${loadAverages()}`,
            '',
          )
        }
      }
    }
    if (SECTIONS.has('trickle')) {
      const options = (name: string) => ({
        rate: TRICKLE_RATE,
        seconds: TRICKLE_S,
        destination,
        admin,
        databaseUrl: databaseUrl(name),
        databaseName: databaseName(name),
      })
      databases.add('trickle_hand').add('trickle_hl')
      const handWritten = await withHandWritten(system('trickle_hand'), destination, true, (start) =>
        runTrickle(options('trickle_hand'), start),
      )
      await prepareLedger(databaseUrl('trickle_hl'), PREFILL)
      const full = await runTrickle(
        options('trickle_hl'),
        hookledger('trickle-hookledger', {
          DATABASE_URL: databaseUrl('trickle_hl'),
          REDIS_URL: testRedisUrl(),
        }),
      )
      const rows = [
        { label: 'hand-written receiver + worker', result: handWritten },
        { label: 'hookledger `serve`', result: full },
      ]
      for (const { result } of rows)
        failed ||= result.non2xx > 0 || result.errors > 0 || result.accepted < result.sent
      lines.push(
        `### Trickle: ${TRICKLE_RATE} signed deliveries/s for ${TRICKLE_S} s into each whole system (~${SMALL_BODY_BYTES} B bodies), latency from sending to the forward's arrival`,
        '',
        ...trickleTable(rows),
        '',
        `p99 ratio hookledger/hand-written: ${(full.p99Ms / handWritten.p99Ms).toFixed(2)}`,
        `load averages after the trickle: ${loadAverages()}`,
        '',
      )
    }
    if (SECTIONS.has('scale')) {
      const scale = await runLedgerAtScale({
        run,
        folder: dataDir,
        admin,
        destination,
        database: (suffix) => {
          databases.add(suffix)
          return { url: databaseUrl(suffix), name: databaseName(suffix) }
        },
        rows: SCALE_ROWS,
        oldDays: SCALE_OLD_DAYS,
        rounds: SCALE_ROUNDS,
        loadSeconds: DURATION_S,
        drainEvents: DRAIN_EVENTS[0] ?? 3000,
        drainConcurrency: DRAIN_CONCURRENCY[0] ?? 32,
        systemConcurrency: SYSTEM_CONCURRENCY,
        defaultRows: SCALE_DEFAULT_ROWS,
        load,
      })
      failed ||= scale.failed
      lines.push(...scale.lines, '', `load averages after the scale section: ${loadAverages()}`, '')
    }
    process.stdout.write(`${lines.join('\n')}\n`)
    if (failed) process.exitCode = 1
  } finally {
    for (const name of databases) {
      await admin.unsafe(`drop database if exists "${databaseName(name)}" with (force)`)
    }
    await admin.end()
    await destination.close()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

await main()
