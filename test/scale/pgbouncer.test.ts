import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { readMigrationFiles } from 'drizzle-orm/migrator'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Ledger, openLedger } from '../../src/db/client.js'
import { dropExpiredPeriods, extendLedgerPartitions } from '../../src/db/ledger-periods.js'
import { MIGRATIONS_FOLDER, migrateLedger } from '../../src/db/migrate.js'
import type { DoctorReport } from '../../src/doctor/run.js'
import { createLogger } from '../../src/logger.js'
import { type Child, startChild } from '../support/child.js'
import { deliverSigned, eventStatuses, forwardsOf, notDoneYet } from '../support/delivery.js'
import { adminDatabaseUrl, testRedisUrl } from '../support/env.js'
import { addPastPeriods } from '../support/periods.js'
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js'
import { runCommand } from '../support/run-command.js'
import { FAULT_TOLERANT } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

// The real service in a child process with its ledger behind a PgBouncer of the test's own in
// transaction mode (each transaction may run on another server session), and a TCP proxy between
// PgBouncer and PostgreSQL: a reset there is what a PostgreSQL restart or failover does behind a
// bouncer, whose client connections (hookledger's pool) stay up while its server connections die.
// The proxy sits on that side because that is the fault a bouncer changes; a reset between
// hookledger and a bouncer is the direct-connection case test/faults/postgres-reset.test.ts covers.

const RESETS = 3
const SENDERS = 4
const STORM = 40
const ROOT = fileURLToPath(new URL('../..', import.meta.url))

let name: string
let admin: postgres.Sql
let direct: Ledger
let proxy: TcpProxy
let bouncer: PgBouncer
let sink: Awaited<ReturnType<typeof startSink>>
let directory: string
let child: Child | undefined
let bouncedUrl: string

beforeAll(async () => {
  name = `hl_test_${randomBytes(6).toString('hex')}`
  admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = new URL(adminDatabaseUrl())
  url.pathname = `/${name}`
  direct = openLedger(url.toString(), { max: 4 })
  proxy = await startTcpProxy()
  bouncer = await startPgBouncer({
    upstream: { host: proxy.host, port: proxy.port },
    user: decodeURIComponent(url.username) || 'postgres',
  })
  bouncedUrl = bouncer.urlFor(url.toString())
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  directory = mkdtempSync(join(tmpdir(), 'hookledger-pgbouncer-'))
  writeFileSync(
    join(directory, 'config.json'),
    JSON.stringify({
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sink.url, timeoutMs: 1000 },
        },
      ],
      ...FAULT_TOLERANT,
    }),
  )
}, 60_000)

afterAll(async () => {
  await child?.kill()
  await bouncer?.close()
  await proxy?.close()
  await sink?.close()
  await direct?.close()
  await admin?.unsafe(`drop database if exists "${name}" with (force)`)
  await admin?.end({ timeout: 5 })
  if (directory) rmSync(directory, { recursive: true, force: true })
})

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))
const deliver = (running: Child, eventId: string) => deliverSigned(running.url, 'acme', eventId)
const statusOf = (eventId: string) => eventStatuses(direct.sql, eventId)

describe('through PgBouncer in transaction mode', () => {
  it('migrations apply, two migrators at once serialised by their transaction-scoped lock', async () => {
    const logger = createLogger('silent')
    await Promise.all([migrateLedger(bouncedUrl, logger), migrateLedger(bouncedUrl, logger)])
    const journal = readMigrationFiles({ migrationsFolder: MIGRATIONS_FOLDER })
    const [applied] = await direct.sql<Array<{ count: number }>>`
      select count(*)::int as count from drizzle.__drizzle_migrations`
    expect(applied?.count).toBe(journal.length)
    const [deployments] = await direct.sql<
      Array<{ count: number }>
    >`select count(*)::int as count from deployment`
    expect(deployments?.count).toBe(1)
    // No session advisory lock left behind on any server session PgBouncer keeps.
    // (This database's only: the server is shared with whatever else runs on it.)
    const locks = await direct.sql`
      select 1 from pg_locks where locktype = 'advisory'
        and database = (select oid from pg_database where datname = current_database())`
    expect(locks).toHaveLength(0)
  }, 60_000)

  it("a transaction runs under its scope's statement_timeout, set for that transaction only", async () => {
    const bounced = openLedger(bouncedUrl, { max: 2, statementTimeoutMs: 20_000 })
    try {
      const view = bounced.scoped(1500)
      const inside = await view.sql.begin(
        (tx) => tx<Array<{ statement_timeout: string }>>`show statement_timeout`,
      )
      expect(inside[0]?.statement_timeout).toBe('1500ms')
      const pool = await bounced.db.transaction((tx) => tx.execute('show statement_timeout'))
      expect((pool as unknown as Array<{ statement_timeout: string }>)[0]?.statement_timeout).toBe('20s')
      // Nothing outlives the transaction on the server session PgBouncer lends next.
      const after = await bounced.sql<Array<{ statement_timeout: string }>>`show statement_timeout`
      expect(after[0]?.statement_timeout).not.toBe('1500ms')
    } finally {
      await bounced.close()
    }
  })

  it('the partition keeper makes periods ahead and detaches and drops an old one through PgBouncer', async () => {
    const [suffix] = await addPastPeriods(direct.sql, { daysAgo: [40] })
    await direct.sql`
      insert into inbound_events (id, source, event_id, payload_hash, headers, status)
      values (hookledger_uuid_v7(now() - interval '40 days'), 'acme', 'old', 'h', '{}', 'done')`
    const bounced = openLedger(bouncedUrl, { max: 2, statementTimeoutMs: 20_000 })
    try {
      const added = await extendLedgerPartitions(bounced.sql, {
        period: 'day',
        dedupWindowDays: 30,
        aheadDays: 4,
      })
      expect(added.periods.length).toBeGreaterThan(0)
      // DETACH … CONCURRENTLY commits on its own, outside any transaction: PgBouncer lends it a server
      // connection for that one statement like any other.
      const outcomes = await dropExpiredPeriods(bounced.sql, { keepDays: 30 })
      expect(outcomes).toEqual([{ suffix, unfinished: 0, dropped: true }])
    } finally {
      await bounced.close()
    }
    const [left] = await direct.sql<Array<{ present: boolean }>>`
      select to_regclass(${`inbound_events_${suffix}`}) is not null as present`
    expect(left?.present).toBe(false)
  })

  it('serves: an event is accepted, DONE and forwarded once', async () => {
    child = await startChild(['bin/hookledger.js', 'serve', '--role', 'all'], {
      DATABASE_URL: bouncedUrl,
      REDIS_URL: testRedisUrl(),
      HOOKLEDGER_CONFIG: join(directory, 'config.json'),
      LOG_LEVEL: 'warn',
    })
    const running = child
    expect(await deliver(running, 'evt_bounced_one')).toEqual({ status: 200, answer: 'accepted' })
    await expect.poll(() => statusOf('evt_bounced_one'), { timeout: 15_000 }).toEqual(['done'])
    expect(forwardsOf(sink, 'evt_bounced_one')).toBe(1)
  }, 60_000)

  it('hookledger doctor reads the ledger through PgBouncer (no startup setting, no prepared statement)', async () => {
    const run = await runCommand(process.execPath, ['bin/hookledger.js', 'doctor', '--json'], {
      cwd: ROOT,
      env: {
        DATABASE_URL: bouncedUrl,
        REDIS_URL: testRedisUrl(),
        HOOKLEDGER_CONFIG: join(directory, 'config.json'),
      },
      timeoutMs: 30_000,
    })
    const report = JSON.parse(run.stdout) as DoctorReport
    expect(
      report.findings.map((finding) => finding.code),
      run.stderr,
    ).not.toContain('postgres.unreachable')
    expect(report.counts.skipped, run.stdout).toBe(0)
  }, 60_000)

  it('a duplicate storm (one event delivered 40 times at once) leaves one row and one forward', async () => {
    const running = child as Child
    const answers = await Promise.all(
      Array.from({ length: STORM }, () => deliver(running, 'evt_bounced_storm')),
    )
    // Every copy is answered 200, or 503 (retry later) when it could not get to the ledger in time:
    // CI and a local run each saw a few 503s (2 and 3 of 40) after the Redis Cluster file, never
    // alone, cause not found yet; the story says it next time. A 500, 503s for over a quarter, a second
    // claim, a second row or a second forward fails.
    const unserved = answers.filter((a) => a.status !== 200)
    const story = `${JSON.stringify(unserved)}\nPgBouncer:\n${bouncer.log()}\nhookledger:\n${running.output().slice(-4000)}`
    expect(
      unserved.filter((a) => a.status !== 503),
      story,
    ).toEqual([])
    expect(unserved.length, story).toBeLessThanOrEqual(STORM / 4)
    expect(answers.filter((a) => a.answer === 'accepted')).toHaveLength(1)
    await expect.poll(() => statusOf('evt_bounced_storm'), { timeout: 15_000 }).toEqual(['done'])
    await sleep(1000) // a second forward would have had time to go out
    // A second forward once failed this on a clean-clone CI run and never locally: if it comes back,
    // the event's attempts say why.
    const attempts = await direct.sql`
      select a.attempt, a.outcome, a.error, a.response_status, a.started_at::text, a.finished_at::text
      from event_attempts a join inbound_events e on e.id = a.event_row_id
      where e.event_id = 'evt_bounced_storm' order by a.attempt`
    expect(
      forwardsOf(sink, 'evt_bounced_storm'),
      `${JSON.stringify(attempts)}\nhookledger:\n${running.output().slice(-4000)}`,
    ).toBe(1)
  }, 60_000)

  it('PostgreSQL connections reset behind PgBouncer under load: the process stays up, every accepted event is DONE and forwarded', async () => {
    const running = child as Child
    const accepted: string[] = []
    const answers = new Map<number | string, number>()
    let sent = 0
    let stopped = false
    const sender = async () => {
      // Bounded in count; a refused delivery waits a moment as a provider's retry would, so a few
      // seconds of PgBouncer refusing every login after a reset cannot spend the whole budget.
      while (!stopped && sent < 3000) {
        const eventId = `evt_bounced_reset_${sent}`
        sent += 1
        const outcome = await deliver(running, eventId).catch(() => ({
          status: 'no answer',
          answer: undefined,
        }))
        if (outcome.status === 200 && outcome.answer === 'accepted') accepted.push(eventId)
        answers.set(outcome.status, (answers.get(outcome.status) ?? 0) + 1)
        if (outcome.status !== 200) await sleep(100)
      }
    }
    const senders = Array.from({ length: SENDERS }, sender)
    const progress = (since: number) =>
      expect
        // Past PgBouncer's own refusal after a reset (server_connect_timeout + server_login_retry).
        .poll(() => accepted.length - since, { timeout: 30_000 })
        .toBeGreaterThanOrEqual(20)
        .catch((error: Error) => {
          throw new Error(
            `${error.message}; answers ${JSON.stringify([...answers])}\nPgBouncer:\n${bouncer.log()}\nhookledger:\n${running.output().slice(-6000)}`,
          )
        })
    try {
      for (let reset = 0; reset < RESETS; reset += 1) {
        await progress(accepted.length)
        await sleep(100) // forwards and DONE marks in flight, not only claims
        expect(proxy.reset()).toBeGreaterThan(0)
      }
      await progress(accepted.length)
    } finally {
      stopped = true
      await Promise.all(senders)
    }
    expect(running.process.exitCode, running.output()).toBeNull()
    // A cut server connection answers 503 (the provider retries), never 500.
    expect(
      [...answers.keys()].filter((status) => status !== 200 && status !== 503),
      `${JSON.stringify([...answers])}\n${running.output().slice(-3000)}`,
    ).toEqual([])
    await expect.poll(() => notDoneYet(direct.sql, accepted), { timeout: 30_000, interval: 500 }).toEqual([])
    const forwarded = new Set(sink.received.map((r) => (JSON.parse(r.body) as { eventId: string }).eventId))
    expect(accepted.filter((eventId) => !forwarded.has(eventId))).toEqual([])
    expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
  }, 180_000)
})
