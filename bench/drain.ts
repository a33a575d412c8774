// The drain section of `npm run bench`: a backlog of forward events, drained by one hookledger worker
// process, and the same backlog drained by the hand-written at-least-once worker in
// bench/baseline-worker.ts, to the same local destination, in the same run.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import postgres from 'postgres'
import { type Child, startChild } from '../test/support/child.js'
import { testRedisUrl } from '../test/support/env.js'
import { baselineJob, createBaselineTable } from './baseline-forwarder.js'
import { startSystemCpu } from './cpu.js'
import type { Destination } from './destination.js'
import { type LedgerCost, startLedgerCost } from './ledger-cost.js'
import { BENCH_SECRET, benchBody, DRAIN_BODY_BYTES, signedRequest } from './signing.js'
import { type StatementCounter, startStatementCounter } from './statement-counter.js'

/** The PostgreSQL server a database URL names: the statement counter sits in front of it. */
function databaseServer(databaseUrl: string): { host: string; port: number } {
  const url = new URL(databaseUrl)
  return { host: url.hostname, port: Number(url.port || 5432) }
}

/** BENCH_CPU_PROF=<folder>: CPU profiles of every process measured, to read before optimising anything. */
export function profileFlags(name: string): string[] {
  const folder = process.env.BENCH_CPU_PROF
  return folder === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${folder}/${name}`]
}

export interface DrainResult {
  label: string
  events: number
  /** Events per second from the first delivery to the last. */
  perSecond: number
  /** From spawning the worker process to its first delivery: start-up, reported apart from the drain. */
  startupMs: number
  /** From the first delivery to the last. */
  drainMs: number
  /** The worker process's CPU from its readiness to the last delivery, per event delivered in that span. */
  cpuMsPerEvent: number
  /** The same span's CPU of the PostgreSQL backends serving this database (not other databases'). */
  postgresCpuMsPerEvent: number
  /** The same span's CPU of redis-server: the whole server, so other work on the machine is in it. */
  redisCpuMsPerEvent: number
  /**
   * How busy both cores were over the drain, everything on them included: a worker that leaves them
   * idle is waiting, not working.
   */
  machineBusyPercent: number
  /** Rows, commits and WAL in the database from the worker's start until it stopped (bench/ledger-cost.ts). */
  cost: LedgerCost
  /** Counted through a proxy in a separate, smaller run (the proxy costs CPU of its own). */
  statementsPerEvent?: number | undefined
  /** The same run's statements by their text, per event. */
  statementsByText?: Map<string, number> | undefined
  /** BullMQ jobs the backlog was queued as, per event. */
  jobsPerEvent: number
  /** Deliveries beyond the first per event: an at-least-once worker may have some after a crash; here none is expected. */
  repeats: number
}

/** Starts a worker, waits for the backlog to arrive at the destination, and measures it. */
async function timeDrain(
  options: DrainOptions,
  events: number,
  start: () => Promise<Child>,
): Promise<Omit<DrainResult, 'label' | 'events' | 'cost' | 'jobsPerEvent'> & { child: Child }> {
  const { destination } = options
  destination.reset()
  const spawnedAt = Date.now()
  const child = await start()
  const meter = await startSystemCpu(child.process.pid, options)
  const deliveredAtReady = destination.delivered()
  const { firstAt, lastAt } = await destination.waitFor(events, 300_000).catch(async (error: Error) => {
    await child.kill('SIGKILL')
    throw new Error(`${error.message}; the worker's last output:\n${child.output().slice(-2000)}`)
  })
  const cpu = await meter.stop(events - deliveredAtReady)
  return {
    perSecond: (events - 1) / Math.max((lastAt - firstAt) / 1000, 0.001),
    startupMs: firstAt - spawnedAt,
    drainMs: lastAt - firstAt,
    cpuMsPerEvent: cpu.processMs,
    postgresCpuMsPerEvent: cpu.postgresMs ?? 0,
    redisCpuMsPerEvent: cpu.redisMs,
    machineBusyPercent: cpu.machineBusyPercent,
    repeats: destination.repeats(),
    child,
  }
}

export interface DrainOptions {
  run: string
  /** The run's own temporary folder (removed with it at the end): the workers' config files go there. */
  folder: string
  events: number
  /** Events in flight in each worker (hookledger's worker.concurrency, the baseline's BullMQ concurrency). */
  concurrency: number
  /** A database of its own; the bench creates and drops it. */
  databaseUrl: string
  databaseName: string
  admin: postgres.Sql
  destination: Destination
  /**
   * The source's retentionDays in the processes' config (default: the config's default), and the
   * dedup window at least as long. The scale section sets it past its expired day, so no process's
   * own retention pass drops what the section measures.
   */
  retentionDays?: number
  /** retention.partitionPeriod in the processes' config (default: the config's default, a day). */
  partitionPeriod?: 'day' | 'week'
}

/** hookledger: an api-only process takes the signed deliveries, then one worker process drains them. */
export async function hookledgerDrain(
  options: DrainOptions,
  destination: Destination,
  events: number,
  label: string,
  countStatements: boolean,
): Promise<DrainResult> {
  const prefix = `hl-bench-${options.run}-${label}-c${options.concurrency}`
  const configPath = join(options.folder, `${label}.json`)
  writeFileSync(
    configPath,
    JSON.stringify({
      sources: [
        {
          id: 'bench',
          verify: { scheme: 'standard-webhooks', secrets: [BENCH_SECRET] },
          handler: { type: 'forward', url: destination.url },
          ...(options.retentionDays === undefined ? {} : { retentionDays: options.retentionDays }),
        },
      ],
      worker: { concurrency: options.concurrency },
      queue: { prefix },
      retention: {
        // A source may not keep its events longer than their ids count as duplicates.
        ...(options.retentionDays === undefined
          ? {}
          : { dedupWindowDays: Math.max(30, options.retentionDays) }),
        ...(options.partitionPeriod === undefined ? {} : { partitionPeriod: options.partitionPeriod }),
      },
    }),
  )
  const env = {
    DATABASE_URL: options.databaseUrl,
    REDIS_URL: testRedisUrl(),
    HOOKLEDGER_CONFIG: configPath,
    LOG_LEVEL: 'warn',
  }
  const ledger = postgres(options.databaseUrl, { max: 1, onnotice: () => {} })
  const counter = countStatements
    ? await startStatementCounter(databaseServer(options.databaseUrl))
    : undefined
  try {
    const api = await startChild(['bin/hookledger.js', 'serve', '--role', 'api'], env)
    const before = await rowCount(ledger)
    const intake = await autocannon({
      url: `${api.url}/webhooks/bench`,
      connections: 50,
      amount: events,
      requests: [
        { setupRequest: (request) => ({ ...request, ...signedRequest({ bytes: DRAIN_BODY_BYTES }) }) },
      ],
    })
    await api.kill('SIGTERM')
    const jobs = await waitingJobs(prefix, 'inbound-events')
    const stored = (await rowCount(ledger)) - before
    if (intake.non2xx > 0 || stored !== events) {
      throw new Error(`the backlog is not complete: ${stored} new rows, ${intake.non2xx} non-2xx answers`)
    }
    await vacuumAsAutovacuumWould(ledger)
    return await measureWorker(options, events, counter, {
      label: 'hookledger worker',
      jobs,
      start: (databaseUrl) =>
        startChild([...profileFlags('hookledger'), 'bin/hookledger.js', 'serve', '--role', 'worker'], {
          ...env,
          DATABASE_URL: databaseUrl,
        }),
      // Every row must be DONE, not merely delivered: the ledger's own work is part of the cost. The
      // statuses named, not `<> 'done'`: a range of the status index, not a scan of a large ledger.
      settled: async () => {
        for (let i = 0; i < 600; i += 1) {
          const [open] = await ledger<{ open: number }[]>`
            select count(*)::int as open from inbound_events
            where status in ('pending', 'processing', 'failed')`
          if (open?.open === 0) return
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
      },
    })
  } finally {
    await counter?.close()
    await ledger.end()
    await removeQueueKeys(prefix)
  }
}

/** The baseline: its own table and queue, the same destination, the same concurrency. */
async function baselineDrain(
  options: DrainOptions,
  destination: Destination,
  events: number,
  countStatements: boolean,
): Promise<DrainResult> {
  const prefix = `hl-bench-${options.run}-baseline-c${options.concurrency}`
  const ledger = postgres(options.databaseUrl, { max: 1, onnotice: () => {} })
  const queue = new Queue('baseline', { connection: { url: testRedisUrl() }, prefix })
  const counter = countStatements
    ? await startStatementCounter(databaseServer(options.databaseUrl))
    : undefined
  try {
    await createBaselineTable(ledger)
    await ledger`truncate baseline_events`
    const rows = await ledger<{ id: string }[]>`
      insert into baseline_events (event_id, body)
      select 'b_' || g, convert_to(replace(${benchBody('b_#', DRAIN_BODY_BYTES)}, '#', g::text), 'UTF8')
      from generate_series(1, ${events}) g
      returning id`
    await vacuumAsAutovacuumWould(ledger)
    for (let i = 0; i < rows.length; i += 1000) {
      await queue.addBulk(rows.slice(i, i + 1000).map((row) => baselineJob(row.id)))
    }
    return await measureWorker(options, events, counter, {
      label: 'hand-written at-least-once BullMQ worker (bench/baseline-forwarder.ts)',
      jobs: await waitingJobs(prefix, 'baseline'),
      start: (databaseUrl) =>
        startChild([...profileFlags('baseline'), '--import', 'tsx', 'bench/baseline-worker.ts'], {
          DATABASE_URL: databaseUrl,
          REDIS_URL: testRedisUrl(),
          BASELINE_PREFIX: prefix,
          BASELINE_QUEUE: 'baseline',
          BASELINE_DESTINATION: destination.url,
          BASELINE_CONCURRENCY: String(options.concurrency),
        }),
      settled: async () => {},
    })
  } finally {
    await counter?.close()
    await queue.obliterate({ force: true }).catch(() => {})
    await queue.close()
    await ledger.end()
  }
}

/**
 * Starts one worker on the backlog (through the statement counter when there is one), times it to
 * the last delivery, waits until it `settled`, stops it and reads what it cost.
 */
async function measureWorker(
  options: DrainOptions,
  events: number,
  counter: StatementCounter | undefined,
  worker: {
    label: string
    /** Jobs waiting in the queue when the worker starts. */
    jobs: number
    start: (databaseUrl: string) => Promise<Child>
    settled: () => Promise<void>
  },
): Promise<DrainResult> {
  const workerUrl = new URL(options.databaseUrl)
  if (counter !== undefined) workerUrl.port = String(counter.port)
  const statementsBefore = counter?.statements() ?? 0
  const textsBefore = counter?.byText() ?? new Map<string, number>()
  const meter = await startLedgerCost(options.databaseUrl)
  const { child, ...timed } = await timeDrain(options, events, () => worker.start(workerUrl.toString()))
  await worker.settled()
  await child.kill('SIGTERM')
  // Backends report their counts when they exit; give them a moment to.
  await new Promise((resolve) => setTimeout(resolve, 1200))
  return {
    label: worker.label,
    events,
    ...timed,
    cost: await meter.stop(),
    jobsPerEvent: worker.jobs / events,
    statementsPerEvent:
      counter === undefined ? undefined : (counter.statements() - statementsBefore) / events,
    statementsByText:
      counter === undefined
        ? undefined
        : new Map(
            [...counter.byText()].map(([text, count]) => [
              text,
              (count - (textsBefore.get(text) ?? 0)) / events,
            ]),
          ),
  }
}

async function waitingJobs(prefix: string, name: string): Promise<number> {
  const queue = new Queue(name, { connection: { url: testRedisUrl() }, prefix })
  try {
    const counts = await queue.getJobCounts('waiting', 'prioritized', 'delayed')
    return Object.values(counts).reduce((sum, count) => sum + count, 0)
  } finally {
    await queue.close()
  }
}

/**
 * What autovacuum would have done by the time a worker starts, done outside the timing. Autovacuum
 * is off on this host's PostgreSQL (and may be on others a bench runs on); without it each round
 * would meet the dead row versions and missing planner statistics the earlier rounds left, which no
 * deployment with autovacuum keeps, while the baseline starts each round on a truncated table.
 *
 * Like autovacuum, it vacuums and analyzes only the tables that changed past its thresholds (the
 * server's own settings). A plain VACUUM ANALYZE of every table recorded the outbound ledger's
 * still-empty tables as empty before the first round; the foreign-key checks of the drain's claims
 * were then planned as sequential scans while `operations` was tiny, and with no later analyze
 * (autovacuum's, after 50 changes) those plans stayed while it grew: each lease statement took
 * 4-5 ms per 30 rows at the start and 30 ms after 9,000 claims, timed alone from one client.
 */
async function vacuumAsAutovacuumWould(ledger: postgres.Sql): Promise<void> {
  // Pending table counters of this session (the baseline's inserts) reach pg_stat_user_tables now,
  // not at its next idle flush; other processes' counters were flushed when they exited.
  await ledger`select pg_stat_force_next_flush()`
  const tables = await ledger<{ name: string; vacuum: boolean; analyze: boolean }[]>`
    with setting as (
      select
        max(setting::float8) filter (where name = 'autovacuum_vacuum_threshold') as vacuum_base,
        max(setting::float8) filter (where name = 'autovacuum_vacuum_scale_factor') as vacuum_scale,
        max(setting::float8) filter (where name = 'autovacuum_vacuum_insert_threshold') as insert_base,
        max(setting::float8) filter (where name = 'autovacuum_vacuum_insert_scale_factor') as insert_scale,
        max(setting::float8) filter (where name = 'autovacuum_analyze_threshold') as analyze_base,
        max(setting::float8) filter (where name = 'autovacuum_analyze_scale_factor') as analyze_scale
      from pg_settings where name like 'autovacuum%')
    select format('%I.%I', t.schemaname, t.relname) as name,
           t.n_dead_tup > s.vacuum_base + s.vacuum_scale * greatest(c.reltuples, 0)
             or t.n_ins_since_vacuum > s.insert_base + s.insert_scale * greatest(c.reltuples, 0) as vacuum,
           t.n_mod_since_analyze > s.analyze_base + s.analyze_scale * greatest(c.reltuples, 0) as analyze
    from pg_stat_user_tables t join pg_class c on c.oid = t.relid cross join setting s`
  for (const table of tables) {
    if (table.vacuum) await ledger.unsafe(`vacuum ${table.analyze ? 'analyze ' : ''}${table.name}`)
    else if (table.analyze) await ledger.unsafe(`analyze ${table.name}`)
  }
}

async function rowCount(ledger: postgres.Sql): Promise<number> {
  const [row] = await ledger<{ count: number }[]>`select count(*)::int as count from inbound_events`
  return row?.count ?? 0
}

export async function removeQueueKeys(prefix: string): Promise<void> {
  const redis = new Redis(testRedisUrl())
  try {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
      cursor = next
      if (keys.length > 0) await redis.unlink(...keys)
    } while (cursor !== '0')
  } finally {
    redis.disconnect()
  }
}

export interface DrainPair {
  hookledger: DrainResult
  baseline: DrainResult
}

export const drainRatio = (pair: DrainPair) => pair.hookledger.perSecond / pair.baseline.perSecond

/**
 * `rounds` timed pairs, the order alternating: the worker that ran second came out up to ~20 % ahead
 * on this host, and one pair's ratio ranged from 0.68 to 1.08 within a single run. The table shows
 * the middle pair by ratio (the lower of the two middle ones for an even count), every pair's ratio
 * beside it.
 */
export async function runDrain(
  options: DrainOptions & { rounds: number },
): Promise<{ middle: DrainPair; rounds: DrainPair[] }> {
  const { destination } = options
  const rounds: DrainPair[] = []
  for (let round = 0; round < options.rounds; round += 1) {
    const runBaseline = () => baselineDrain(options, destination, options.events, false)
    const runHookledger = () => hookledgerDrain(options, destination, options.events, `drain${round}`, false)
    if (round % 2 === 0) {
      const baseline = await runBaseline()
      rounds.push({ baseline, hookledger: await runHookledger() })
    } else {
      const hookledger = await runHookledger()
      rounds.push({ hookledger, baseline: await runBaseline() })
    }
  }
  const byRatio = [...rounds].sort((a, b) => drainRatio(a) - drainRatio(b))
  const middle = byRatio[Math.floor((byRatio.length - 1) / 2)]
  if (middle === undefined) throw new Error('the drain needs at least one round')
  // Counted through the proxy with a smaller backlog: the proxy's own CPU would distort the timings.
  const counted = Math.min(options.events, 1000)
  const baselineCounted = await baselineDrain(options, destination, counted, true)
  const hookledgerCounted = await hookledgerDrain(options, destination, counted, 'counted', true)
  for (const pair of rounds) {
    pair.baseline.statementsPerEvent = baselineCounted.statementsPerEvent
    pair.baseline.statementsByText = baselineCounted.statementsByText
    pair.hookledger.statementsPerEvent = hookledgerCounted.statementsPerEvent
    pair.hookledger.statementsByText = hookledgerCounted.statementsByText
  }
  return { middle, rounds }
}
