// What the ledger writes per forwarded event, counted rather than timed (CPU timings on a shared host
// are noise; these figures are not): WAL bytes, row and index writes per relation, statements and
// commits. N signed deliveries go to an api-only process (intake), then one worker process forwards
// them to a local destination (drain), each phase measured on its own. A third phase (steady) sends N
// more at COST_STEADY_RATE a second (100 by default) to an api process while a worker forwards them,
// as a deployment whose workers keep up runs; it is reported beside the total, not in it.
//
// It runs against a PostgreSQL cluster of its own (initdb in a temporary folder, the same server
// binaries as the test server), so the WAL it reads is its own and pg_stat_statements can be loaded:
//   npx tsx bench/per-event-cost.ts            (COST_EVENTS=2000 by default)
//   COST_JSON=out.json npx tsx bench/per-event-cost.ts   (also writes the figures as JSON)
import { execFileSync, spawn } from 'node:child_process'
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import postgres from 'postgres'
import { migrateLedger } from '../src/db/migrate.js'
import { createLogger } from '../src/logger.js'
import { type Child, freePort, startChild } from '../test/support/child.js'
import { testRedisUrl } from '../test/support/env.js'
import { addPastPeriods } from '../test/support/periods.js'
import { startDestination } from './destination.js'
import { fillScaleHistory } from './ledger-at-scale.js'
import { BENCH_SECRET, DRAIN_BODY_BYTES, signedRequest } from './signing.js'

const EVENTS = Number(process.env.COST_EVENTS ?? 2000)
const STEADY_RATE = Number(process.env.COST_STEADY_RATE ?? 100)
/**
 * Daily periods made before today, empty, as a ledger that keeps retentionDays of history has them
 * (30 by default): what the number of partitions costs each statement, apart from the rows in them.
 */
const PAST_DAYS = Number(process.env.COST_PAST_DAYS ?? 0)
/**
 * DONE events filled first over ten past days with the scale section's SQL (bench/ledger-at-scale.ts),
 * then VACUUM ANALYZE: what a history costs each statement, its plans made with the statistics of
 * periods that hold rows (0 by default).
 */
const HISTORY = Number(process.env.COST_HISTORY ?? 0)
const CONNECTIONS = 32
const PG_BIN = process.env.COST_PG_BIN ?? '/usr/lib/postgresql/15/bin'
const LEDGER_ROLE = 'hookledger'

interface Cluster {
  port: number
  url(database: string, user?: string): string
  stop(): Promise<void>
}

/** A throwaway cluster owned by the `postgres` user (the server refuses to run as root). */
async function startCluster(): Promise<Cluster> {
  const folder = mkdtempSync(join(tmpdir(), 'hl-cost-'))
  const pgdata = join(folder, 'data')
  const asPostgres = process.getuid?.() === 0 ? ['runuser', '-u', 'postgres', '--'] : []
  if (asPostgres.length > 0) {
    const ids = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }))
    chownSync(folder, ids('-u'), ids('-g'))
  }
  const run = (command: string[]) => {
    const [file, ...args] = [...asPostgres, ...command]
    execFileSync(file as string, args, { stdio: 'ignore' })
  }
  run([join(PG_BIN, 'initdb'), '-D', pgdata, '-A', 'trust', '-U', 'root', '--no-sync'])
  const port = await freePort()
  const [file, ...args] = [
    ...asPostgres,
    join(PG_BIN, 'postgres'),
    '-D',
    pgdata,
    '-p',
    String(port),
    '-k',
    folder,
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'shared_preload_libraries=pg_stat_statements',
    '-c',
    'pg_stat_statements.track=all',
    '-c',
    'pg_stat_statements.track_planning=on',
    // No checkpoint and no autovacuum inside a phase: each phase starts after a CHECKPOINT, so the
    // full-page images in its WAL are those of the pages it touches, not of a timer.
    '-c',
    'autovacuum=off',
    '-c',
    'checkpoint_timeout=1h',
    '-c',
    'max_wal_size=16GB',
    '-c',
    'fsync=off',
  ]
  const server = spawn(file as string, args, { stdio: 'ignore' })
  const url = (database: string, user = 'root') => `postgres://${user}@127.0.0.1:${port}/${database}`
  for (let i = 0; ; i += 1) {
    const probe = postgres(url('postgres'), { max: 1, onnotice: () => {}, connect_timeout: 2 })
    try {
      await probe`select 1`
      break
    } catch (error) {
      if (i > 100) throw error
      await new Promise((resolve) => setTimeout(resolve, 100))
    } finally {
      await probe.end()
    }
  }
  return {
    port,
    url,
    async stop() {
      // pg_ctl, not a signal: runuser does not pass one on to the server.
      run([join(PG_BIN, 'pg_ctl'), '-D', pgdata, 'stop', '-m', 'fast'])
      if (server.exitCode === null) await new Promise((resolve) => server.once('exit', resolve))
      rmSync(folder, { recursive: true, force: true })
    },
  }
}

/** The relation a WAL record is about, by its first block reference (`rel <spc>/<db>/<relfilenode>`). */
const WAL_BY_RELATION = `
  select (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1] as relfilenode, resource_manager as rmgr,
         split_part(record_type, ' ', 1) as kind, count(*)::int as records,
         sum(record_length)::bigint as bytes, sum(fpi_length)::bigint as fpi_bytes
  from pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
  group by 1, 2, 3`

interface Snapshot {
  lsn: string
  commits: number
  tables: Map<string, { ins: number; upd: number; hot: number; del: number }>
}

interface PhaseFigures {
  phase: string
  events: number
  walBytes: number
  fpiBytes: number
  /** Transactions that wrote (a WAL commit record each). */
  writeCommits: number
  /** Every committed transaction of the ledger's database (pg_stat_database), reads included. */
  commits: number
  statements: number
  tables: Array<{ table: string; ins: number; upd: number; hot: number; del: number }>
  relations: Array<{ relation: string; records: Record<string, number>; bytes: number; fpiBytes: number }>
  topStatements: Array<{
    calls: number
    rows: number
    walBytes: number
    planMs: number
    /** The slowest single planning: a fresh connection's first plan of the statement. */
    maxPlanMs: number
    execMs: number
    maxExecMs: number
    query: string
  }>
}

async function snapshot(admin: postgres.Sql, ledgerUrl: string): Promise<Snapshot> {
  const [position] = await admin<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`
  const [stats] = await admin<{ commits: string }[]>`
    select xact_commit::text as commits from pg_stat_database where datname = 'ledger'`
  // A connection of its own, closed at once: its own transaction is the one to discount.
  const ledger = postgres(ledgerUrl, { max: 1, onnotice: () => {} })
  try {
    const rows = await ledger<{ table: string; ins: string; upd: string; hot: string; del: string }[]>`
      select relname as table, n_tup_ins::text as ins, n_tup_upd::text as upd,
             n_tup_hot_upd::text as hot, n_tup_del::text as del
      from pg_stat_user_tables`
    return {
      lsn: position?.lsn ?? '0/0',
      commits: Number(stats?.commits ?? 0),
      tables: new Map(
        rows.map((r) => [
          r.table,
          { ins: Number(r.ins), upd: Number(r.upd), hot: Number(r.hot), del: Number(r.del) },
        ]),
      ),
    }
  } finally {
    await ledger.end()
  }
}

/** Every backend's table counters reach the statistics once it exits or has been idle a moment. */
const settleStatistics = () => new Promise((resolve) => setTimeout(resolve, 1500))

async function measure(
  phase: string,
  cluster: Cluster,
  admin: postgres.Sql,
  run: (watch: { ledgerQueries: number }) => Promise<void>,
): Promise<PhaseFigures> {
  const ledgerUrl = cluster.url('ledger')
  await admin`checkpoint`
  await admin`select pg_stat_statements_reset()`
  await settleStatistics()
  const before = await snapshot(admin, ledgerUrl)
  const watch = { ledgerQueries: 0 }
  await run(watch)
  await settleStatistics()
  const after = await snapshot(admin, ledgerUrl)
  const ledger = postgres(ledgerUrl, { max: 1, onnotice: () => {} })
  try {
    const names = new Map(
      (
        await ledger<{ relfilenode: string; name: string }[]>`
          select pg_relation_filenode(oid)::text as relfilenode, relname as name from pg_class
          where pg_relation_filenode(oid) is not null`
      ).map((row) => [row.relfilenode, row.name]),
    )
    const wal = await admin.unsafe<
      {
        relfilenode: string | null
        rmgr: string
        kind: string
        records: number
        bytes: string
        fpi_bytes: string
      }[]
    >(WAL_BY_RELATION, [before.lsn, after.lsn])
    const [totals] = await admin<{ bytes: string }[]>`
      select pg_wal_lsn_diff(${after.lsn}::pg_lsn, ${before.lsn}::pg_lsn)::bigint::text as bytes`
    const relations = new Map<string, PhaseFigures['relations'][number]>()
    let fpiBytes = 0
    let writeCommits = 0
    for (const row of wal) {
      const relation =
        row.relfilenode === null
          ? `(${row.rmgr})`
          : (names.get(row.relfilenode) ?? `(catalog or other: ${row.relfilenode})`)
      const entry = relations.get(relation) ?? { relation, records: {}, bytes: 0, fpiBytes: 0 }
      const kind = `${row.rmgr}:${row.kind}`
      entry.records[kind] = (entry.records[kind] ?? 0) + row.records
      entry.bytes += Number(row.bytes)
      entry.fpiBytes += Number(row.fpi_bytes)
      relations.set(relation, entry)
      fpiBytes += Number(row.fpi_bytes)
      if (row.rmgr === 'Transaction' && row.kind === 'COMMIT') writeCommits += row.records
    }
    const statements = await admin<
      {
        calls: string
        rows: string
        wal_bytes: string
        plan_ms: number
        max_plan_ms: number
        exec_ms: number
        max_exec_ms: number
        query: string
      }[]
    >`
      select s.calls::text, s.rows::text, s.wal_bytes::text, s.total_plan_time as plan_ms,
             s.max_plan_time as max_plan_ms, s.total_exec_time as exec_ms, s.max_exec_time as max_exec_ms, s.query
      from pg_stat_statements s join pg_roles r on r.oid = s.userid
      where r.rolname = ${LEDGER_ROLE}
      order by s.calls desc, s.wal_bytes desc`
    const tables = [...after.tables].flatMap(([table, counts]) => {
      const was = before.tables.get(table) ?? { ins: 0, upd: 0, hot: 0, del: 0 }
      const delta = {
        table,
        ins: counts.ins - was.ins,
        upd: counts.upd - was.upd,
        hot: counts.hot - was.hot,
        del: counts.del - was.del,
      }
      return delta.ins + delta.upd + delta.del === 0 ? [] : [delta]
    })
    return {
      phase,
      events: EVENTS,
      walBytes: Number(totals?.bytes ?? 0),
      fpiBytes,
      writeCommits,
      // Less the snapshot's own transaction and the watcher's polls.
      commits: after.commits - before.commits - 1 - watch.ledgerQueries,
      statements: statements.reduce((sum, s) => sum + Number(s.calls), 0),
      tables: tables.sort((a, b) => a.table.localeCompare(b.table)),
      relations: [...relations.values()].sort((a, b) => b.bytes - a.bytes),
      topStatements: statements.map((s) => ({
        calls: Number(s.calls),
        rows: Number(s.rows),
        walBytes: Number(s.wal_bytes),
        planMs: s.plan_ms,
        maxPlanMs: s.max_plan_ms,
        execMs: s.exec_ms,
        maxExecMs: s.max_exec_ms,
        query: s.query.replace(/\s+/g, ' ').slice(0, 110),
      })),
    }
  } finally {
    await ledger.end()
  }
}

async function removeQueueKeys(prefix: string): Promise<void> {
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

/** WAL records that write a new heap tuple (an insert, or an update's new version). */
const HEAP_TUPLES = /^Heap:(INSERT|UPDATE|HOT_UPDATE)(\+INIT)?$/
/** WAL records that add an index entry (a leaf insert, a deduplicated posting list insert, a GIN insert). */
const INDEX_ENTRIES = /^(Btree:INSERT_LEAF|Btree:INSERT_POST|Gin:INSERT)$/

function records(relations: PhaseFigures['relations'], kind: RegExp): number {
  return relations.reduce(
    (total, relation) =>
      total +
      Object.entries(relation.records).reduce((sum, [name, count]) => sum + (kind.test(name) ? count : 0), 0),
    0,
  )
}

const per = (value: number) => (value / EVENTS).toFixed(2)

function report(figures: PhaseFigures[]): string {
  const lines: string[] = []
  const backlog = figures.filter((f) => f.phase !== 'steady')
  const sum = (pick: (f: PhaseFigures) => number) => backlog.reduce((total, f) => total + pick(f), 0)
  lines.push(
    `## Per forwarded event (${EVENTS} events; ${CONNECTIONS} connections at intake; ${PAST_DAYS} past periods; ${HISTORY} events of history)`,
    '',
  )
  lines.push(
    '| phase | WAL bytes | of which full-page images | heap tuples written | index entries | statements | commits | write commits |',
  )
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const f of [
    ...backlog,
    {
      phase: 'total',
      walBytes: sum((f) => f.walBytes),
      fpiBytes: sum((f) => f.fpiBytes),
      statements: sum((f) => f.statements),
      commits: sum((f) => f.commits),
      writeCommits: sum((f) => f.writeCommits),
      relations: backlog.flatMap((f) => f.relations),
    },
    ...figures.filter((f) => f.phase === 'steady'),
  ]) {
    lines.push(
      `| ${f.phase} | ${per(f.walBytes)} | ${per(f.fpiBytes)} | ${per(records(f.relations, HEAP_TUPLES))} | ${per(records(f.relations, INDEX_ENTRIES))} | ${per(f.statements)} | ${per(f.commits)} | ${per(f.writeCommits)} |`,
    )
  }
  lines.push('', '| phase | table | inserted | updated | HOT | deleted |', '|---|---|---:|---:|---:|---:|')
  for (const f of figures) {
    for (const t of f.tables) {
      lines.push(
        `| ${f.phase} | ${t.table} | ${per(t.ins)} | ${per(t.upd)} | ${per(t.hot)} | ${per(t.del)} |`,
      )
    }
  }
  lines.push(
    '',
    '| phase | relation | WAL records | WAL bytes | full-page images |',
    '|---|---|---|---:|---:|',
  )
  for (const f of figures) {
    for (const r of f.relations) {
      if (r.bytes / EVENTS < 1) continue
      const records = Object.entries(r.records)
        .filter(([, count]) => count / EVENTS >= 0.01)
        .map(([kind, count]) => `${kind} ${per(count)}`)
        .join(', ')
      lines.push(`| ${f.phase} | ${r.relation} | ${records} | ${per(r.bytes)} | ${per(r.fpiBytes)} |`)
    }
  }
  lines.push(
    '',
    '| phase | calls/event | rows/event | WAL bytes/event | plan µs/event | slowest plan ms | execute µs/event | slowest execute ms | statement |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---|',
  )
  for (const f of figures) {
    for (const s of f.topStatements) {
      if (s.calls / EVENTS < 0.01) continue
      lines.push(
        `| ${f.phase} | ${per(s.calls)} | ${per(s.rows)} | ${per(s.walBytes)} | ${per(s.planMs * 1000)} | ${s.maxPlanMs.toFixed(1)} | ${per(s.execMs * 1000)} | ${s.maxExecMs.toFixed(1)} | \`${s.query.replaceAll('|', '\\|')}\` |`,
      )
    }
  }
  return lines.join('\n')
}

/** Waits until every row is DONE, counting its polls so that the phase's commits can leave them out. */
async function untilAllDone(cluster: Cluster, watch: { ledgerQueries: number }): Promise<void> {
  const poll = postgres(cluster.url('ledger'), { max: 1, onnotice: () => {} })
  try {
    for (let i = 0; ; i += 1) {
      watch.ledgerQueries += 1
      const [open] = await poll<{ open: number }[]>`
        select count(*)::int as open from inbound_events where status <> 'done'`
      if (open?.open === 0) return
      if (i > 600) throw new Error(`${open?.open} events not DONE after a minute`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  } finally {
    await poll.end()
  }
}

async function main() {
  // The processes measured run dist/: built again first when a source is newer.
  execFileSync(process.execPath, ['scripts/build-if-stale.mjs'], { stdio: 'inherit' })
  const cluster = await startCluster()
  const admin = postgres(cluster.url('postgres'), { max: 1, onnotice: () => {} })
  const destination = await startDestination()
  const folder = mkdtempSync(join(tmpdir(), 'hl-cost-config-'))
  const prefix = `hl-cost-${process.pid}`
  const children: Child[] = []
  try {
    await admin.unsafe(`create role ${LEDGER_ROLE} login superuser`)
    await admin`create database ledger`
    await admin`create extension pg_stat_statements`
    await admin`create extension pg_walinspect`
    await migrateLedger(cluster.url('ledger'), createLogger('warn'))
    if (PAST_DAYS > 0) {
      const ledger = postgres(cluster.url('ledger'), { max: 1, onnotice: () => {} })
      await addPastPeriods(ledger, { daysAgo: Array.from({ length: PAST_DAYS }, (_, i) => PAST_DAYS - i) })
      await ledger.end()
    }
    if (HISTORY > 0) {
      progress(`history: ${HISTORY} DONE events over the scale section's days`)
      await fillScaleHistory(cluster.url('ledger'), HISTORY)
    }
    const configPath = join(folder, 'config.json')
    writeFileSync(
      configPath,
      JSON.stringify({
        sources: [
          {
            id: 'bench',
            verify: { scheme: 'standard-webhooks', secrets: [BENCH_SECRET] },
            handler: { type: 'forward', url: destination.url },
            // Longer than the history, so no retention pass drops a period while a phase runs.
            retentionDays: 45,
          },
        ],
        worker: { concurrency: 32 },
        queue: { prefix },
        retention: { dedupWindowDays: 45 },
      }),
    )
    const env = {
      DATABASE_URL: cluster.url('ledger', LEDGER_ROLE),
      REDIS_URL: testRedisUrl(),
      HOOKLEDGER_CONFIG: configPath,
      LOG_LEVEL: 'warn',
    }
    const figures: PhaseFigures[] = []
    progress(`intake: ${EVENTS} signed deliveries to an api-only process`)
    figures.push(
      await measure('intake', cluster, admin, async () => {
        const api = await startChild(['bin/hookledger.js', 'serve', '--role', 'api'], env)
        children.push(api)
        const result = await autocannon({
          url: `${api.url}/webhooks/bench`,
          connections: CONNECTIONS,
          amount: EVENTS,
          requests: [
            { setupRequest: (request) => ({ ...request, ...signedRequest({ bytes: DRAIN_BODY_BYTES }) }) },
          ],
        })
        // A graceful stop waits for the enqueues under way, so the phase holds all of them.
        await api.kill('SIGTERM')
        if (result.non2xx > 0 || result.errors > 0) {
          throw new Error(`intake: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
        }
      }),
    )
    // What autovacuum would have done by the time a worker starts (bench/drain.ts does the same).
    const ledger = postgres(cluster.url('ledger'), { max: 1, onnotice: () => {} })
    await ledger`vacuum analyze`
    await ledger.end()
    progress('drain: one worker process forwards them')
    figures.push(
      await measure('drain', cluster, admin, async (watch) => {
        const worker = await startChild(['bin/hookledger.js', 'serve', '--role', 'worker'], env)
        children.push(worker)
        await destination.waitFor(EVENTS, 300_000)
        await untilAllDone(cluster, watch)
        await worker.kill('SIGTERM')
        if (destination.repeats() > 0) throw new Error(`${destination.repeats()} events were delivered twice`)
      }),
    )
    progress(`steady: ${EVENTS} more at ${STEADY_RATE}/s to an api process while a worker forwards them`)
    destination.reset()
    figures.push(
      await measure('steady', cluster, admin, async (watch) => {
        const worker = await startChild(['bin/hookledger.js', 'serve', '--role', 'worker'], env)
        children.push(worker)
        const api = await startChild(['bin/hookledger.js', 'serve', '--role', 'api'], env)
        children.push(api)
        const result = await autocannon({
          url: `${api.url}/webhooks/bench`,
          connections: CONNECTIONS,
          amount: EVENTS,
          overallRate: STEADY_RATE,
          requests: [
            { setupRequest: (request) => ({ ...request, ...signedRequest({ bytes: DRAIN_BODY_BYTES }) }) },
          ],
        })
        await destination.waitFor(EVENTS, 300_000)
        await untilAllDone(cluster, watch)
        await api.kill('SIGTERM')
        await worker.kill('SIGTERM')
        if (result.non2xx > 0 || result.errors > 0) {
          throw new Error(`steady: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
        }
        if (destination.repeats() > 0) throw new Error(`${destination.repeats()} events were delivered twice`)
      }),
    )
    const text = report(figures)
    console.log(text)
    if (process.env.COST_JSON !== undefined)
      writeFileSync(process.env.COST_JSON, JSON.stringify(figures, null, 2))
  } finally {
    for (const child of children) await child.kill('SIGKILL')
    await destination.close()
    await admin.end()
    await cluster.stop()
    await removeQueueKeys(prefix)
    rmSync(folder, { recursive: true, force: true })
  }
}

const progress = (message: string) => process.stderr.write(`${new Date().toISOString()} ${message}\n`)

await main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
