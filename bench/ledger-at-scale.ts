// The scale section of `npm run bench`: the partitioned ledger (migration 0018) with a history of
// BENCH_SCALE_ROWS DONE events over SCALE_DAYS daily periods, filled by SQL, against an empty one:
//   - intake (the whole system under autocannon) and drain (one worker process on a backlog) on
//     both ledgers, in BENCH_SCALE_ROUNDS pairs whose order alternates, and the median pair's ratio:
//     one load of each, minutes apart, differed by more than the history's effect on a noisy host;
//   - the WAL each intake wrote per stored event, full-page images apart: a claim inserts its dedup
//     key at a random place of an index that holds the history's keys, and the first change of a
//     page after a checkpoint copies the whole page to the WAL;
//   - one retention pass (src/retention/loop.ts startRetention().sweep()) that finds exactly one
//     day past retention: its time, the rows it removed, the dead tuples it left;
//   - the same day removed on a ledger migrated only up to 0017 (one unpartitioned table), by the
//     row-by-row pass retention ran before 0018, reproduced statement for statement in SQL (the
//     code of today needs 0018's tables);
//   - beside that pass, files of the same bytes unlinked outside PostgreSQL: the filesystem's share;
//   - the intake's p99 while a retention pass drops a day, against the same load without it, and
//     while only files of that day's bytes are unlinked (the disk's part of the difference).
import {
  closeSync,
  fsyncSync,
  mkdtempSync,
  openSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { open, unlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { performance } from 'node:perf_hooks'
import postgres from 'postgres'
import type { Config } from '../src/config/config.js'
import { migrateLedger } from '../src/db/migrate.js'
import { createLogger } from '../src/logger.js'
import { startRetention } from '../src/retention/loop.js'
import { usesGenericPlans } from '../src/retention/partitions.js'
import { buildConfig } from '../src/service/config.js'
import { type Child, startChild } from '../test/support/child.js'
import { testRedisUrl } from '../test/support/env.js'
import { migrationsUpTo } from '../test/support/migrations.js'
import { addPastPeriods } from '../test/support/periods.js'
import { cpuMs } from './cpu.js'
import type { Destination } from './destination.js'
import { type DrainResult, hookledgerDrain, removeQueueKeys } from './drain.js'
import { costPerEvent, eventsStored, type LedgerCost, startLedgerCost } from './ledger-cost.js'
import { BENCH_SECRET } from './signing.js'

/** Days of history, one period each. */
export const SCALE_DAYS = 10
/** The retentionDays of the pass measured. */
const RETENTION_DAYS = 30
/**
 * Days before today (UTC) that hold rows: RETENTION_DAYS + 1 is the one past retention, then the
 * younger ones from RETENTION_DAYS - 1 down. The period RETENTION_DAYS days back is left empty: it
 * starts before now() - RETENTION_DAYS days, so the pre-0018 pass (received_at < now() - 30 days)
 * would take its first hours as well, while the partitioned ledger keeps it whole until it ends.
 * Empty, the rows past retention are the same day for both.
 */
const EXPIRED_DAY = RETENTION_DAYS + 1
const youngerDays = (count: number) => Array.from({ length: count }, (_, i) => RETENTION_DAYS - 1 - i)
/** The pre-0018 pass's batch (retention.batchSize's default). */
const OLD_BATCH = 1000
/** When the retention pass starts within the intake load it is measured under. */
const PASS_AFTER_MS = 1500
/**
 * The service's own retention (its worker runs a pass a minute after it starts) keeps the expired
 * day: only the bench's pass drops a period. Its dedup window is as long (a config rule). At most 37:
 * a config that keeps more than GENERIC_PLAN_MAX_PERIODS periods (these days + 1 + 2 made ahead)
 * plans the worker's batched statements at each call, which a default config's ledger (30 days)
 * does not.
 */
const SERVICE_RETENTION_DAYS = 37
/** Small headers as a provider sends them. */
const HEADERS = JSON.stringify({
  'content-type': 'application/json',
  'user-agent': 'Bench-Webhooks/1.0',
  'webhook-timestamp': '1764900000',
})
const LEDGER_TABLES =
  '^(inbound_events|inbound_event_payloads|event_attempts|event_replays|event_routes|event_ordering_keys|inbound_event_keys)(_[0-9]+)?$'

export interface LoadResult {
  acceptedPerSecond: number
  p50: number
  p99: number
  non2xx: number
  errors: number
  accepted: number
  /** Epoch ms of the load's start. */
  startedAt: number
}

export interface ScaleOptions {
  run: string
  /** The run's own temporary folder: config files, the migrations up to 0017. */
  folder: string
  admin: postgres.Sql
  destination: Destination
  /** A database of the section's own (created here, registered by the caller for the final drop). */
  database: (suffix: string) => { url: string; name: string }
  /** History rows in all (BENCH_SCALE_ROWS). */
  rows: number
  /** Days of the pre-0018 ledger: the expired one and this many minus one younger (BENCH_SCALE_OLD_DAYS). */
  oldDays: number
  /** The intake load's length, each run. */
  loadSeconds: number
  /** Pairs of loads (and of drains) on the empty ledger and the history, their order alternating. */
  rounds: number
  /** The drain's backlog, in events, and the worker's concurrency. */
  drainEvents: number
  drainConcurrency: number
  /** The whole system's worker concurrency during the intake. */
  systemConcurrency: number
  /** What the default size would be, for the estimate of its fill. */
  defaultRows: number
  load: (url: string, seconds: number) => Promise<LoadResult>
}

interface IntakeRun<T> {
  load: LoadResult
  /** What the database wrote over the load and its forwards; undefined when not metered. */
  cost: LedgerCost | undefined
  /** From the end of the load to the last forward; undefined when not every forward arrived in 120 s. */
  lagSeconds: number | undefined
  alongside: T | undefined
}

interface PassResult {
  /** Epoch ms of the pass's start (after its readings of the statistics). */
  startedAt: number
  wallMs: number
  /** CPU of the pass's PostgreSQL backend; undefined when its connection changed midway. */
  backendCpuMs: number | undefined
  /** Execution time of the database's statements by pg_stat_statements, when the server loads it. */
  statementsMs: number | undefined
  /** Rows removed per table. */
  removed: Map<string, number>
  /** DELETE statements run (the pre-0018 pass); 0 for a pass that only drops. */
  batches: number
  /** False when the pass stopped on its bound before a batch came back short. */
  complete: boolean
  deadBefore: number
  deadAfter: number
}

export interface ScaleResult {
  lines: string[]
  /** A load with non-2xx answers or errors, or a pass that did not remove the expired day. */
  failed: boolean
}

/** The start of the UTC day `daysAgo` days before `today` (itself a UTC midnight). */
const dayStart = (today: Date, daysAgo: number) => new Date(today.getTime() - daysAgo * 86_400_000)

/**
 * One day of DONE events, `rows` of them spread over it, each with its payload row and one attempt
 * (and, partitioned, its dedup key in the current generation), as a day of traffic leaves them: one
 * INSERT … SELECT per table. Partitioned, the ids are version 7 UUIDs of their received_at, in the
 * day's period; before 0018 they are the table's default (random, version 4).
 */
async function fillDay(
  sql: postgres.Sql,
  options: {
    today: Date
    daysAgo: number
    rows: number
    partitioned: boolean
    /** Makes the event ids unique: a dropped day's dedup keys outlive it, so a refill needs other ids. */
    tag?: string
  },
): Promise<void> {
  const starts = dayStart(options.today, options.daysAgo)
  const ends = dayStart(options.today, options.daysAgo - 1)
  const msPerRow = (86_400_000 - 1000) / options.rows
  const tag = options.tag ?? String(options.daysAgo)
  const days = sql`
    select 'msg_hist_' || ${tag} || '_' || g as event_id,
           ${starts.toISOString()}::timestamptz + (g - 1) * ${msPerRow}::float8 * interval '1 ms' as at,
           convert_to('{"type":"invoice.paid","data":{"id":"in_' || ${tag} || '_' || g
             || '","object":"invoice","amount_paid":' || (g % 100000) || ',"currency":"usd","customer":"cus_'
             || substr(md5(g::text), 1, 14) || '","status":"paid","lines":' || (g % 7)
             || ',"pad":"' || repeat('x', 30) || '"}}', 'UTF8') as body
    from generate_series(1, ${options.rows}) g`
  if (options.partitioned) {
    // Since 0020 the bytes are the payload row, and the event row holds no body.
    await sql`
      with e as materialized (${days}),
      inserted as (
        insert into inbound_events (id, source, event_id, event_type, payload_hash, headers, status, attempts,
                                    received_at, enqueued_at, processed_at, updated_at)
        select hookledger_uuid_v7(e.at), 'bench', e.event_id, 'invoice.paid', encode(sha256(e.body), 'hex'),
               ${HEADERS}::jsonb, 'done', 1, e.at, e.at, e.at + interval '40 ms', e.at + interval '40 ms'
        from e
        returning id, event_id)
      insert into inbound_event_payloads (event_row_id, body)
      select inserted.id, e.body from inserted join e using (event_id)`
  } else {
    await sql`
      insert into inbound_events (source, event_id, event_type, payload_hash, body, headers, status, attempts,
                                  received_at, enqueued_at, processed_at, updated_at)
      select 'bench', e.event_id, 'invoice.paid', encode(sha256(e.body), 'hex'), e.body, ${HEADERS}::jsonb, 'done',
             1, e.at, e.at, e.at + interval '40 ms', e.at + interval '40 ms'
      from (${days}) e`
  }
  // The day's events: its partition, or (one table) its range of received_at.
  const suffix = options.partitioned ? await periodSuffix(sql, starts) : ''
  const day = options.partitioned
    ? sql`(select * from ${sql(`inbound_events_${suffix}`)}) d`
    : sql`(select * from inbound_events
           where received_at >= ${starts.toISOString()}::timestamptz and received_at < ${ends.toISOString()}::timestamptz) d`
  if (!options.partitioned) {
    // Before 0020 the payload row is the body parsed, for the payload search.
    await sql`
      insert into inbound_event_payloads (event_row_id, body)
      select d.id, convert_from(d.body, 'UTF8')::jsonb from ${day}`
  }
  await sql`
    insert into event_attempts (event_row_id, attempt, replay, outcome, response_status, started_at, finished_at)
    select d.id, 1, 0, 'done', 200, d.enqueued_at, d.processed_at from ${day}`
  if (options.partitioned) {
    await sql`
      insert into inbound_event_keys (generation, source, event_id, body_key, event_row_id, payload_hash, origin)
      select (select max(starts) from inbound_key_generations where starts <= now()), d.source, d.event_id,
             d.body_key, d.id, d.payload_hash, d.origin
      from ${day}`
  }
}

/**
 * Weekly periods (Monday to Monday, UTC, as retention.partitionPeriod "week" makes them) from the
 * week of the day `days` before `today` up to today's period, which a new ledger has as a day: the
 * last one ends there, part of a week.
 */
async function addPastWeeks(sql: postgres.Sql, today: Date, days: number): Promise<void> {
  await sql`set timezone = 'UTC'`
  await sql`
    with bounds as (
      select generate_series(date_trunc('week', ${today.toISOString()}::timestamptz - ${days} * interval '1 day'),
                             ${today.toISOString()}::timestamptz, interval '1 week') as at
      union
      select ${today.toISOString()}::timestamptz),
    weeks as (select at as starts, lead(at) over (order by at) as ends from bounds)
    select hookledger_add_ledger_period(starts, ends) from weeks where ends is not null order by starts`
}

async function periodSuffix(sql: postgres.Sql, starts: Date): Promise<string> {
  const [row] = await sql<{ suffix: string }[]>`
    select suffix from ledger_periods where starts = ${starts.toISOString()}::timestamptz`
  if (row === undefined) throw new Error(`no ledger period starts at ${starts.toISOString()}`)
  return row.suffix
}

interface Fill {
  rows: number
  insertMs: number
  vacuumMs: number
}

const scaleHistoryDays = () => [EXPIRED_DAY, ...youngerDays(SCALE_DAYS - 1)]

/**
 * The scale section's history, about `rows` DONE events over its days (the expired day and the
 * SCALE_DAYS - 1 after it), in a partitioned ledger: for the statement and cost benches
 * (STMT_HISTORY, COST_HISTORY), so that their history is this section's.
 */
export function fillScaleHistory(url: string, rows: number): Promise<Fill> {
  const today = new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000)
  const days = scaleHistoryDays()
  return fillHistory(url, { today, days, perDay: Math.ceil(rows / days.length), partitioned: true })
}

/** Fills `days` (days back) with `perDay` events each, then vacuum analyze and a checkpoint. */
async function fillHistory(
  url: string,
  options: { today: Date; days: number[]; perDay: number; partitioned: boolean },
): Promise<Fill> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await sql`set maintenance_work_mem = '256MB'`
    if (options.partitioned) {
      // Every period from the oldest day to yesterday, as a ledger that ran all along has them.
      const oldest = Math.max(...options.days)
      await addPastPeriods(sql, {
        daysAgo: Array.from({ length: oldest }, (_, i) => oldest - i),
        today: options.today,
      })
    }
    const started = performance.now()
    for (const daysAgo of options.days) {
      await fillDay(sql, {
        today: options.today,
        daysAgo,
        rows: options.perDay,
        partitioned: options.partitioned,
      })
    }
    const inserted = performance.now()
    await sql`vacuum analyze`
    await sql`checkpoint`
    return {
      rows: options.perDay * options.days.length,
      insertMs: inserted - started,
      vacuumMs: performance.now() - inserted,
    }
  } finally {
    await sql.end()
  }
}

/** Dead tuples of the ledger's tables (every partition), once this session's counts are flushed and settled. */
async function ledgerDeadTuples(sql: postgres.Sql): Promise<number> {
  await sql`select pg_stat_force_next_flush()`
  let last = -1
  for (let i = 0; i < 10; i += 1) {
    const [row] = await sql<{ dead: string }[]>`
      select coalesce(sum(n_dead_tup), 0)::text as dead from pg_stat_user_tables where relname ~ ${LEDGER_TABLES}`
    const dead = Number(row?.dead ?? 0)
    if (dead === last) return dead
    last = dead
    await new Promise((resolve) => setTimeout(resolve, 500))
  }
  return last
}

/** Rows deleted so far per ledger table (pg_stat_user_tables.n_tup_del), summed over its partitions. */
async function deletedRows(sql: postgres.Sql): Promise<Map<string, number>> {
  await sql`select pg_stat_force_next_flush()`
  const rows = await sql<{ name: string; deleted: string }[]>`
    select regexp_replace(relname, '_[0-9]+$', '') as name, sum(n_tup_del)::text as deleted
    from pg_stat_user_tables where relname ~ ${LEDGER_TABLES} group by 1`
  return new Map(rows.map((row) => [row.name, Number(row.deleted)]))
}

/** pg_stat_statements' execution time of this database so far, when the server loads it. */
async function statementsTime(sql: postgres.Sql): Promise<number | undefined> {
  const [loaded] = await sql<{ on: boolean }[]>`
    select current_setting('shared_preload_libraries') ~ 'pg_stat_statements' as on`
  if (loaded?.on !== true) return undefined
  await sql`create extension if not exists pg_stat_statements`
  const [row] = await sql<{ ms: number }[]>`
    select coalesce(sum(total_exec_time), 0)::float8 as ms from pg_stat_statements
    where dbid = (select oid from pg_database where datname = current_database())`
  return row?.ms
}

/**
 * Times `pass` on one connection of its own: wall time in this process, its backend's CPU, and
 * pg_stat_statements' execution time when the server has it. Dead tuples are read before and after.
 */
async function timePass(
  url: string,
  /** False under a load: the dead tuples never settle then, and are not reported. */
  settle: boolean,
  pass: (sql: postgres.Sql) => Promise<{ batches: number; complete: boolean; removed?: Map<string, number> }>,
): Promise<PassResult> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const deadBefore = settle ? await ledgerDeadTuples(sql) : Number.NaN
    const deletedBefore = await deletedRows(sql)
    const statementsBefore = await statementsTime(sql)
    const [before] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`
    const cpuBefore = cpuMs(before?.pid)
    const startedAt = Date.now()
    const started = performance.now()
    const outcome = await pass(sql)
    const wallMs = performance.now() - started
    const cpuAfter = cpuMs(before?.pid)
    const [after] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`
    const statementsAfter = await statementsTime(sql)
    const deletedAfter = await deletedRows(sql)
    const removed =
      outcome.removed ??
      new Map([...deletedAfter].map(([name, count]) => [name, count - (deletedBefore.get(name) ?? 0)]))
    return {
      startedAt,
      wallMs,
      backendCpuMs: after?.pid === before?.pid ? cpuAfter - cpuBefore : undefined,
      statementsMs:
        statementsBefore === undefined || statementsAfter === undefined
          ? undefined
          : statementsAfter - statementsBefore,
      removed,
      batches: outcome.batches,
      complete: outcome.complete,
      deadBefore,
      deadAfter: settle ? await ledgerDeadTuples(sql) : Number.NaN,
    }
  } finally {
    await sql.end()
  }
}

async function ledgerPeriodCount(url: string): Promise<number> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from ledger_periods`
    return row?.n ?? 0
  } finally {
    await sql.end()
  }
}

/** Deadlocks PostgreSQL has detected in the database so far. */
async function deadlocks(url: string): Promise<number> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const [row] = await sql<{ n: string }[]>`
      select deadlocks::text as n from pg_stat_database where datname = current_database()`
    return Number(row?.n ?? 0)
  } finally {
    await sql.end()
  }
}

/** Exact row counts of one period's partitions, by table. */
async function periodRows(sql: postgres.Sql, suffix: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>()
  for (const table of ['inbound_events', 'inbound_event_payloads', 'event_attempts']) {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from ${sql(`${table}_${suffix}`)}`
    counts.set(table, row?.n ?? 0)
  }
  return counts
}

interface ExpiredPeriod {
  suffix: string
  rows: Map<string, number>
  /** On-disk bytes of its partitions with their indexes and TOAST, which dropping them frees. */
  bytes: number
  /** The database server's data directory, when this process may read the setting. */
  dataDirectory: string | undefined
}

/** The expired period's suffix and its partitions' rows, counted before a pass (and outside any load). */
async function expiredPeriod(url: string, today: Date): Promise<ExpiredPeriod> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    const suffix = await periodSuffix(sql, dayStart(today, EXPIRED_DAY))
    const [size] = await sql<{ bytes: string; directory: string | null }[]>`
      select coalesce(sum(pg_total_relation_size(c.oid)), 0)::text as bytes,
             current_setting('data_directory', true) as directory
      from pg_class c
      where c.relkind = 'r' and c.relispartition and c.relname ~ ${`_${suffix}$`}`
    return {
      suffix,
      rows: await periodRows(sql, suffix),
      bytes: Number(size?.bytes ?? 0),
      dataDirectory: size?.directory ?? undefined,
    }
  } finally {
    await sql.end()
  }
}

/**
 * Files of `bytes` (1 GiB segments, as PostgreSQL's), written and synced in a folder on the
 * filesystem of PostgreSQL's data directory, to unlink beside a pass: a DROP's COMMIT truncates or
 * unlinks its tables' files, and on a filesystem mounted with `discard` (or a virtual disk slow to
 * free extents) that, not PostgreSQL, is most of a pass's wall time. Undefined when no folder on
 * that filesystem is writable from here.
 */
function filesToUnlink(bytes: number, dataDirectory: string | undefined): UnlinkControl | undefined {
  if (dataDirectory === undefined || bytes <= 0) return undefined
  let device: number
  try {
    device = statSync(dataDirectory).dev
  } catch {
    return undefined
  }
  const folder = [tmpdir(), dirname(dataDirectory)].find((candidate) => {
    try {
      return statSync(candidate).dev === device
    } catch {
      return false
    }
  })
  if (folder === undefined) return undefined
  const work = mkdtempSync(join(folder, 'hookledger-unlink-'))
  const chunk = Buffer.alloc(8 * 1024 * 1024, 1)
  const segment = 1024 * 1024 * 1024
  const files: string[] = []
  try {
    for (let left = bytes; left > 0; left -= segment) {
      const file = join(work, String(files.length))
      const size = Math.min(left, segment)
      const fd = openSync(file, 'w')
      try {
        for (let written = 0; written < size; written += chunk.length)
          writeSync(fd, chunk, 0, Math.min(chunk.length, size - written))
        fsyncSync(fd)
      } finally {
        closeSync(fd)
      }
      files.push(file)
    }
  } catch (error) {
    rmSync(work, { recursive: true, force: true })
    throw error
  }
  return {
    async unlinkMs() {
      try {
        const started = performance.now()
        // Off the event loop (libuv's pool), so a load running in this process keeps its pace.
        for (const file of files) await unlink(file)
        const directory = await open(work, 'r')
        try {
          await directory.sync()
        } finally {
          await directory.close()
        }
        return performance.now() - started
      } finally {
        rmSync(work, { recursive: true, force: true })
      }
    },
  }
}

interface UnlinkControl {
  /** Unlinks the files and syncs their folder; the time it took. */
  unlinkMs(): Promise<number>
}

/**
 * Today's retention pass, startRetention(...).sweep(), once: on the partitioned ledger it drops the
 * expired period whole (its rows counted before) and then finds no row left to delete.
 */
async function partitionedPass(
  url: string,
  config: Config,
  expired: ExpiredPeriod,
  settle = true,
): Promise<PassResult> {
  const { suffix } = expired
  return timePass(url, settle, async (sql) => {
    const retention = startRetention({ sql, config, logger: createLogger('warn') })
    try {
      await retention.sweep()
    } finally {
      await retention.stop()
    }
    const [left] = await sql<
      { n: number }[]
    >`select count(*)::int as n from ledger_periods where suffix = ${suffix}`
    return { batches: 0, complete: left?.n === 0, removed: left?.n === 0 ? expired.rows : new Map() }
  })
}

/**
 * The pass retention ran before 0018 (deleteDoneEvents at 3c4d8e8, batchSize 1000), on one source:
 * batch after batch until one comes back short. Bounded: no more batches than the expired rows
 * need plus ten, and `limitMs` in all.
 */
function oldPass(expiredRows: number, limitMs: number) {
  return async (sql: postgres.Sql) => {
    const maxBatches = Math.ceil(expiredRows / OLD_BATCH) + 10
    const deadline = Date.now() + limitMs
    let batches = 0
    for (; batches < maxBatches; ) {
      const deleted = await sql`
        delete from inbound_events where id in (
          select id from inbound_events
          where source = ${'bench'} and status = 'done'
            and received_at < now() - ${RETENTION_DAYS} * interval '1 day'
          order by received_at
          limit ${OLD_BATCH}
          for update skip locked)`
      batches += 1
      if (deleted.count < OLD_BATCH) return { batches, complete: true }
      if (Date.now() > deadline) break
    }
    return { batches, complete: false }
  }
}

/** The whole system (`serve`: api and worker) on `databaseUrl`, loaded; `alongside` runs during the load. */
async function intake<T>(
  options: ScaleOptions,
  configPath: string,
  databaseUrl: string,
  seconds: number,
  alongside?: () => Promise<T>,
  metered = false,
): Promise<IntakeRun<T>> {
  const meter = metered ? await startLedgerCost(databaseUrl) : undefined
  let cost: LedgerCost | undefined
  try {
    const child: Child = await startChild(['bin/hookledger.js', 'serve'], {
      DATABASE_URL: databaseUrl,
      REDIS_URL: testRedisUrl(),
      HOOKLEDGER_CONFIG: configPath,
      LOG_LEVEL: 'warn',
    })
    try {
      options.destination.reset()
      // Settled at once, so a failure before the load ends is not an unhandled rejection.
      const running = alongside?.().then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      )
      const loaded = await options.load(child.url, seconds)
      const loadEnded = Date.now()
      const outcome = running === undefined ? undefined : await running
      if (outcome !== undefined && 'error' in outcome) throw outcome.error
      let lagSeconds: number | undefined
      try {
        const { lastAt } = await options.destination.waitFor(loaded.accepted, 120_000)
        lagSeconds = Math.max(0, lastAt - loadEnded) / 1000
      } catch {
        // Not every forward arrived in time.
      }
      // Its statistics reach the server once the process has ended.
      await child.kill('SIGTERM')
      cost = await meter?.stop()
      return { load: loaded, cost, lagSeconds, alongside: outcome?.value }
    } finally {
      await child.kill('SIGTERM')
    }
  } finally {
    // A load that failed still ends the meter's session, and with it its replication slot.
    if (cost === undefined) await meter?.stop().catch(() => undefined)
  }
}

async function drain(
  options: ScaleOptions,
  database: { url: string; name: string },
  label: string,
  partitionPeriod: 'day' | 'week' = 'day',
) {
  return hookledgerDrain(
    {
      partitionPeriod,
      run: options.run,
      folder: options.folder,
      events: options.drainEvents,
      concurrency: options.drainConcurrency,
      databaseUrl: database.url,
      databaseName: database.name,
      admin: options.admin,
      destination: options.destination,
      retentionDays: SERVICE_RETENTION_DAYS,
    },
    options.destination,
    options.drainEvents,
    label,
    false,
  )
}

const inSeconds = (ms: number | undefined) => (ms === undefined ? '–' : (ms / 1000).toFixed(2))
const count = (value: number) => value.toLocaleString('en-US')
const met = (ok: boolean) => (ok ? 'met' : 'not met')

export async function runLedgerAtScale(options: ScaleOptions): Promise<ScaleResult> {
  const { admin } = options
  const perDay = Math.max(1, Math.floor(options.rows / SCALE_DAYS))
  const historyDays = scaleHistoryDays()
  const oldDays = [EXPIRED_DAY, ...youngerDays(Math.max(1, options.oldDays - 1))]
  // A queue prefix per database: a prefix belongs to one deployment (one database).
  const prefixes: string[] = []
  const serviceConfig = (label: string, partitionPeriod: 'day' | 'week' = 'day') => {
    const prefix = `hl-bench-${options.run}-scale-${label}`
    prefixes.push(prefix)
    const path = join(options.folder, `scale-${label}.json`)
    writeFileSync(path, serviceConfigText(prefix, partitionPeriod))
    return path
  }
  const serviceConfigText = (prefix: string, partitionPeriod: 'day' | 'week' = 'day') =>
    JSON.stringify({
      sources: [
        {
          id: 'bench',
          verify: { scheme: 'standard-webhooks', secrets: [BENCH_SECRET] },
          handler: { type: 'forward', url: options.destination.url },
          retentionDays: SERVICE_RETENTION_DAYS,
        },
      ],
      worker: { concurrency: options.systemConcurrency },
      queue: { prefix },
      retention: { dedupWindowDays: SERVICE_RETENTION_DAYS, partitionPeriod },
    })
  // The pass's config: the same source, kept RETENTION_DAYS days.
  const passConfig = buildConfig(
    {
      sources: [
        {
          id: 'bench',
          verify: { scheme: 'standard-webhooks', secrets: [BENCH_SECRET] },
          handler: { type: 'forward', url: options.destination.url },
          retentionDays: RETENTION_DAYS,
        },
      ],
    },
    () => undefined,
  )
  const logger = createLogger('warn')
  // Long enough for the pass to start well inside it and end before it does.
  const passLoadSeconds = Math.max(options.loadSeconds, 5)
  const empty = options.database('scale_empty')
  const periods = options.database('scale_periods')
  const weeks = options.database('scale_weeks')
  const history = options.database('scale_history')
  const old = options.database('scale_old')
  const drop = (name: string) => admin.unsafe(`drop database if exists "${name}" with (force)`)
  const [clock] = await admin<{ today: Date }[]>`select date_trunc('day', now(), 'UTC') as today`
  const today = clock?.today ?? new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000)
  let failed = false
  try {
    // 2. An empty partitioned ledger, kept for the pairs below; and an empty one with the history's
    // periods, measured once here, which tells what the number of partitions costs from what their
    // rows do.
    const createLedger = async (
      database: { url: string; name: string },
      prepare: (sql: postgres.Sql) => Promise<unknown> = async () => {},
    ) => {
      await admin.unsafe(`create database "${database.name}"`)
      await migrateLedger(database.url, logger)
      const sql = postgres(database.url, { max: 1, onnotice: () => {} })
      try {
        await prepare(sql)
      } finally {
        await sql.end()
      }
      return ledgerPeriodCount(database.url)
    }
    const emptyPeriodCount = await createLedger(empty)
    const emptyConfig = serviceConfig('empty')
    const oldest = Math.max(...historyDays)
    const periodCount = await createLedger(periods, async (sql) => {
      await addPastPeriods(sql, { daysAgo: Array.from({ length: oldest }, (_, i) => oldest - i), today })
      await sql`vacuum analyze`
    })
    // The service's own config, as its processes decide at start whether their batched statements
    // keep generic plans (src/service/service.ts).
    const genericPlans = usesGenericPlans(
      buildConfig(JSON.parse(serviceConfigText('plan-check')), () => undefined),
      periodCount,
    )
    const periodsIntake = await intake(options, serviceConfig('periods'), periods.url, options.loadSeconds)
    const periodsDrain = await drain(options, periods, 'scale-periods')
    await drop(periods.name)
    // The same days in weekly periods (retention.partitionPeriod "week"): what fewer partitions give.
    const weekCount = await createLedger(weeks, async (sql) => {
      await addPastWeeks(sql, today, oldest)
      await sql`vacuum analyze`
    })
    const weeksIntake = await intake(options, serviceConfig('weeks', 'week'), weeks.url, options.loadSeconds)
    const weeksDrain = await drain(options, weeks, 'scale-weeks', 'week')
    await drop(weeks.name)

    // 1. The history, by SQL.
    await admin.unsafe(`create database "${history.name}"`)
    await migrateLedger(history.url, logger)
    const fill = await fillHistory(history.url, { today, days: historyDays, perDay, partitioned: true })
    const historyConfig = serviceConfig('history')

    // The empty ledger and the history in pairs: an intake on each, then a drain on each, the one
    // measured first alternating from round to round.
    const ledgers = {
      empty: { database: empty, config: emptyConfig },
      history: { database: history, config: historyConfig },
    }
    const pairs: Pair[] = []
    for (let round = 0; round < options.rounds; round += 1) {
      const order = round % 2 === 0 ? (['empty', 'history'] as const) : (['history', 'empty'] as const)
      const loads: Partial<Record<keyof typeof ledgers, IntakeRun<unknown>>> = {}
      for (const which of order) {
        const { database, config } = ledgers[which]
        loads[which] = await intake(options, config, database.url, options.loadSeconds, undefined, true)
      }
      const drains: Partial<Record<keyof typeof ledgers, DrainResult>> = {}
      for (const which of order)
        drains[which] = await drain(options, ledgers[which].database, `scale-${which}`)
      if (!loads.empty || !loads.history || !drains.empty || !drains.history)
        throw new Error('a pair is incomplete')
      pairs.push({
        empty: loads.empty,
        history: loads.history,
        emptyDrain: drains.empty,
        historyDrain: drains.history,
      })
    }
    await drop(empty.name)

    // 3. One retention pass, from a vacuumed ledger (the intake and drain updated rows).
    const vacuum = postgres(history.url, { max: 1, onnotice: () => {} })
    try {
      await vacuum`vacuum inbound_events, inbound_event_payloads, event_attempts, event_routes, inbound_event_keys`
    } finally {
      await vacuum.end()
    }
    const expired = await expiredPeriod(history.url, today)
    const pass = await partitionedPass(history.url, passConfig, expired)
    const unlinkMs = await filesToUnlink(expired.bytes, expired.dataDirectory)?.unlinkMs()

    // 5. The day again, then the intake without and with a pass dropping it.
    const refill = postgres(history.url, { max: 1, onnotice: () => {} })
    const refillStarted = performance.now()
    try {
      await addPastPeriods(refill, { daysAgo: [EXPIRED_DAY], today })
      await fillDay(refill, {
        today,
        daysAgo: EXPIRED_DAY,
        rows: perDay,
        partitioned: true,
        tag: `${EXPIRED_DAY}b`,
      })
      await refill`vacuum analyze`
      await refill`checkpoint`
    } finally {
      await refill.end()
    }
    const refillMs = performance.now() - refillStarted
    const again = await expiredPeriod(history.url, today)
    const deadlocksBefore = await deadlocks(history.url)
    const quiet = await intake(options, historyConfig, history.url, passLoadSeconds)
    const deadlocksQuiet = await deadlocks(history.url)
    const during = await intake(options, historyConfig, history.url, passLoadSeconds, async () => {
      await new Promise((resolve) => setTimeout(resolve, PASS_AFTER_MS))
      // A pass that fails under the load (the keeper's lock timeout, say) is a result, not a crash.
      return partitionedPass(history.url, passConfig, again, false).catch((error: unknown) =>
        error instanceof Error ? error.message : String(error),
      )
    })
    const deadlocksDuring = await deadlocks(history.url)
    // The same load while only the filesystem frees the day's bytes: what of the pass's effect on
    // the intake is the disk's, not PostgreSQL's.
    const control = filesToUnlink(again.bytes, again.dataDirectory)
    const underUnlink =
      control === undefined
        ? undefined
        : await intake(options, historyConfig, history.url, passLoadSeconds, async () => {
            await new Promise((resolve) => setTimeout(resolve, PASS_AFTER_MS))
            return control.unlinkMs()
          })
    const duringPass = typeof during.alongside === 'object' ? during.alongside : undefined
    const duringError = typeof during.alongside === 'string' ? during.alongside : undefined
    await drop(history.name)

    // 4. Today's schema: the same expired day and younger ones, removed row by row.
    await admin.unsafe(`create database "${old.name}"`)
    await migrateLedger(old.url, logger, migrationsUpTo(17, options.folder))
    const oldFill = await fillHistory(old.url, { today, days: oldDays, perDay, partitioned: false })
    const oldResult = await timePass(old.url, true, oldPass(perDay, Math.max(60_000, perDay)))
    await drop(old.name)

    // What it all says.
    const loads = [
      ...pairs.flatMap((pair) => [pair.empty, pair.history]),
      periodsIntake,
      weeksIntake,
      quiet,
      during,
      ...(underUnlink === undefined ? [] : [underUnlink]),
    ]
    failed ||= loads.some((r) => r.load.non2xx > 0 || r.load.errors > 0 || r.lagSeconds === undefined)
    const removedEvents = (r: PassResult) => r.removed.get('inbound_events') ?? 0
    failed ||= removedEvents(pass) !== perDay || !pass.complete
    failed ||= duringPass === undefined || removedEvents(duringPass) !== perDay
    failed ||= removedEvents(oldResult) !== perDay || !oldResult.complete
    const estimateMin = (fill.insertMs + fill.vacuumMs) / fill.rows / 60_000
    const ratio = (a: number, b: number) => a / Math.max(b, 0.001)
    const intakeRatioOf = (pair: Pair) =>
      ratio(pair.history.load.acceptedPerSecond, pair.empty.load.acceptedPerSecond)
    const p99RatioOf = (pair: Pair) => ratio(pair.history.load.p99, pair.empty.load.p99)
    const drainRatioOf = (pair: Pair) => ratio(pair.historyDrain.perSecond, pair.emptyDrain.perSecond)
    // Each measure's own median pair: the pair of the median intake ratio need not be the drain's.
    const intakePair = medianPair(pairs, intakeRatioOf)
    const p99Pair = medianPair(pairs, p99RatioOf)
    const drainPair = medianPair(pairs, drainRatioOf)
    const intakeRatio = intakeRatioOf(intakePair)
    const p99Ratio = p99RatioOf(p99Pair)
    const drainRatio_ = drainRatioOf(drainPair)
    const eachPair = (ratioOf: (pair: Pair) => number) =>
      pairs.map((pair) => ratioOf(pair).toFixed(2)).join(', ')
    const wal = (run: IntakeRun<unknown>) => {
      const perEvent = run.cost === undefined ? undefined : costPerEvent(run.cost, eventsStored(run.cost))
      if (perEvent?.walBytes === undefined) return '–'
      return `${(perEvent.walBytes / 1024).toFixed(1)} (${((perEvent.fullPageBytes ?? 0) / 1024).toFixed(1)})`
    }
    const lag = (run: IntakeRun<unknown>) => run.lagSeconds?.toFixed(1) ?? 'not within 120 s'
    const pgTime = (r: PassResult) =>
      r.statementsMs === undefined
        ? `${inSeconds(r.wallMs)} (wall, client-side)`
        : `${inSeconds(r.statementsMs)} (pg_stat_statements)`
    const removedLine = (r: PassResult) =>
      ['inbound_events', 'inbound_event_payloads', 'event_attempts']
        .map((table) => `${count(r.removed.get(table) ?? 0)} ${table}`)
        .join(', ')
    const passP99Ratio = ratio(during.load.p99, quiet.load.p99)
    const timed = (r: PassResult) => r.statementsMs ?? r.wallMs
    const lines = [
      `### Ledger at scale: ${count(fill.rows)} DONE events over ${historyDays.length} daily periods (${count(perDay)} a day; days ${historyDays.join(', ')} before today, UTC), ~200 B bodies, retentionDays ${RETENTION_DAYS}: exactly day ${EXPIRED_DAY} is past it`,
      '',
      `History filled by SQL in ${inSeconds(fill.insertMs)} s (INSERT … SELECT per day and table: events, payloads, attempts, dedup keys) + ${inSeconds(fill.vacuumMs)} s vacuum analyze and checkpoint; ` +
        `at this rate the default ${count(options.defaultRows)} rows would take ~${(estimateMin * options.defaultRows).toFixed(0)} min (linear: the indexes' growth makes it longer).`,
      `The pre-0018 ledger: ${count(oldFill.rows)} events over days ${oldDays.join(', ')} (the same expired day, ${count(oldFill.rows - perDay)} younger rows; fewer than the partitioned ledger's, to fill once only), filled in ${inSeconds(oldFill.insertMs)} s + ${inSeconds(oldFill.vacuumMs)} s.`,
      `Loads: ${options.loadSeconds} s of autocannon on \`serve\` (api and worker in one process), then until every accepted event was forwarded. Drain: ${count(options.drainEvents)} events, one worker process, concurrency ${options.drainConcurrency} (hookledger only).`,
      '',
      `The service's worker ${genericPlans ? 'keeps one generic plan for each of its batched statements' : 'plans its batched statements at each call (its config keeps more periods than a generic plan should lock)'}: retentionDays ${SERVICE_RETENTION_DAYS}, ${periodCount} periods held.`,
      '',
      `Each of the ${pairs.length} pairs: an intake on each ledger, then a drain on each, the history first in every second pair. Figures are each measure's median pair; the ratio column lists every pair's in order.`,
      '',
      `| measure | empty partitioned ledger (${emptyPeriodCount} periods) | empty, with the history's ${periodCount} periods (once) | empty, the same days in ${weekCount} weekly periods (once) | ledger with the history (${periodCount} periods) | ratio history/empty: median (each pair) | target | |`,
      '|---|---:|---:|---:|---:|---|---|',
      `| intake, accepted/s | ${intakePair.empty.load.acceptedPerSecond.toFixed(0)} | ${periodsIntake.load.acceptedPerSecond.toFixed(0)} | ${weeksIntake.load.acceptedPerSecond.toFixed(0)} | ${intakePair.history.load.acceptedPerSecond.toFixed(0)} | ${intakeRatio.toFixed(2)} (${eachPair(intakeRatioOf)}) | at most 10 % lower | ${met(intakeRatio >= 0.9)} |`,
      `| intake, p50 ms | ${intakePair.empty.load.p50} | ${periodsIntake.load.p50} | ${weeksIntake.load.p50} | ${intakePair.history.load.p50} | ${ratio(intakePair.history.load.p50, intakePair.empty.load.p50).toFixed(2)} | | |`,
      `| intake, p99 ms | ${p99Pair.empty.load.p99} | ${periodsIntake.load.p99} | ${weeksIntake.load.p99} | ${p99Pair.history.load.p99} | ${p99Ratio.toFixed(2)} (${eachPair(p99RatioOf)}) | at most 10 % higher | ${met(p99Ratio <= 1.1)} |`,
      `| intake, WAL KB per stored event (of which full-page images) | ${wal(intakePair.empty)} | – | – | ${wal(intakePair.history)} | | | |`,
      `| intake, forwards done after the load, s | ${lag(intakePair.empty)} | ${lag(periodsIntake)} | ${lag(weeksIntake)} | ${lag(intakePair.history)} | | | |`,
      `| drain, events/s first to last delivery | ${drainPair.emptyDrain.perSecond.toFixed(0)} | ${periodsDrain.perSecond.toFixed(0)} | ${weeksDrain.perSecond.toFixed(0)} | ${drainPair.historyDrain.perSecond.toFixed(0)} | ${drainRatio_.toFixed(2)} (${eachPair(drainRatioOf)}) | at most 10 % lower | ${met(drainRatio_ >= 0.9)} |`,
      `| drain, worker + PostgreSQL CPU ms/event | ${cpuLine(drainPair.emptyDrain)} | ${cpuLine(periodsDrain)} | ${cpuLine(weeksDrain)} | ${cpuLine(drainPair.historyDrain)} | | | |`,
      '',
      '| one retention pass, the expired day | rows removed | PostgreSQL time, s | wall s | its backend CPU s | DELETE statements | dead tuples in the ledger tables before / after | target | |',
      '|---|---|---:|---:|---:|---:|---:|---|---|',
      `| partitioned (0018): startRetention().sweep() | ${removedLine(pass)} | ${pgTime(pass)} | ${inSeconds(pass.wallMs)} | ${inSeconds(pass.backendCpuMs)} | ${pass.batches} | ${count(pass.deadBefore)} / ${count(pass.deadAfter)} | under 1 s, 0 dead tuples | ${met(timed(pass) < 1000 && pass.deadAfter === 0)} |`,
      `| the same pass less the filesystem's unlink of the same bytes (below) | | ${unlinkMs === undefined ? 'not measured' : inSeconds(Math.max(0, timed(pass) - unlinkMs))} | | | | | under 1 s | ${unlinkMs === undefined ? '' : met(timed(pass) - unlinkMs < 1000)} |`,
      `| one unpartitioned table (0017): the old row-by-row pass in SQL, batches of ${OLD_BATCH} | ${removedLine(oldResult)}${oldResult.complete ? '' : ' (stopped on its time bound)'} | ${pgTime(oldResult)} | ${inSeconds(oldResult.wallMs)} | ${inSeconds(oldResult.backendCpuMs)} | ${oldResult.batches} | ${count(oldResult.deadBefore)} / ${count(oldResult.deadAfter)} | – | |`,
      '',
      `The day was filled again (${inSeconds(refillMs)} s) for the pass under load: ${passLoadSeconds} s loads, the pass started ${duringPass === undefined ? '–' : inSeconds(duringPass.startedAt - during.load.startedAt)} s into the second.${duringError === undefined ? '' : ` The pass under load failed: ${duringError}`}`,
      '',
      '| intake on the ledger with the history | accepted/s | p50 ms | p99 ms | non-2xx | errors | deadlocks detected in the database | pass wall s | pass rows removed | target | |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|',
      `| without a retention pass | ${quiet.load.acceptedPerSecond.toFixed(0)} | ${quiet.load.p50} | ${quiet.load.p99} | ${quiet.load.non2xx} | ${quiet.load.errors} | ${deadlocksQuiet - deadlocksBefore} | – | – | | |`,
      `| while the pass drops the expired day | ${during.load.acceptedPerSecond.toFixed(0)} | ${during.load.p50} | ${during.load.p99} | ${during.load.non2xx} | ${during.load.errors} | ${deadlocksDuring - deadlocksQuiet} | ${inSeconds(duringPass?.wallMs)} | ${duringPass === undefined ? 'the pass failed' : removedLine(duringPass)} | p99 within 20 % of without | ${met(passP99Ratio <= 1.2)} (${passP99Ratio.toFixed(2)}) |`,
      underUnlink === undefined
        ? "| while files of the same bytes are unlinked outside PostgreSQL | not measured: no folder on the data directory's filesystem is writable from here | | | | | | | | | |"
        : `| while files of the same bytes are unlinked outside PostgreSQL (no pass) | ${underUnlink.load.acceptedPerSecond.toFixed(0)} | ${underUnlink.load.p50} | ${underUnlink.load.p99} | ${underUnlink.load.non2xx} | ${underUnlink.load.errors} | – | ${inSeconds(underUnlink.alongside)} (the unlink) | – | | (${ratio(underUnlink.load.p99, quiet.load.p99).toFixed(2)}) |`,
      '',
      `The expired day's partitions held ${(expired.bytes / 1024 ** 3).toFixed(2)} GiB on disk (tables, indexes, TOAST), whose files the DROP's COMMIT truncates and unlinks. ${unlinkMs === undefined ? "Files of the same bytes were not unlinked beside it: no folder on the data directory's filesystem is writable from here." : `Files of the same bytes, written and synced on the data directory's filesystem outside PostgreSQL, took ${inSeconds(unlinkMs)} s to unlink: that much of the pass's wall time is the filesystem's.`}`,
      '',
      `PostgreSQL time of a pass: ${pass.statementsMs === undefined ? 'pg_stat_statements is not loaded by this server (shared_preload_libraries), so it is the wall time of the pass measured in the bench process (its backend CPU beside it)' : 'pg_stat_statements execution time of the database over the pass'}.`,
    ]
    return { lines, failed }
  } finally {
    for (const database of [empty, periods, weeks, history, old]) await drop(database.name)
    for (const prefix of prefixes) await removeQueueKeys(prefix)
  }
}

/** One round's loads and drains on the empty ledger and on the history. */
interface Pair {
  empty: IntakeRun<unknown>
  history: IntakeRun<unknown>
  emptyDrain: DrainResult
  historyDrain: DrainResult
}

/** The pair whose ratio is the median (the lower middle one of an even count). */
function medianPair(pairs: readonly Pair[], ratioOf: (pair: Pair) => number): Pair {
  const sorted = [...pairs].sort((a, b) => ratioOf(a) - ratioOf(b))
  const middle = sorted[Math.floor((sorted.length - 1) / 2)]
  if (middle === undefined) throw new Error('the scale section measured no pair')
  return middle
}

const cpuLine = (r: DrainResult) => `${r.cpuMsPerEvent.toFixed(2)}+${r.postgresCpuMsPerEvent.toFixed(2)}`
