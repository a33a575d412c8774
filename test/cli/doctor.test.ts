import { randomUUID } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runDoctorCommand } from '../../src/cli/doctor.js'
import { readEnvironment } from '../../src/config/env.js'
import type { DoctorReport } from '../../src/doctor/run.js'
import { deploymentQueuePrefix, INBOUND_QUEUE, processEventJob } from '../../src/queue/jobs.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testRedisUrl } from '../support/env.js'
import { startRedisServer } from '../support/redis-server.js'
import { runCommand } from '../support/run-command.js'
import { startTcpProxy } from '../support/tcp-proxy.js'
import { temporaryDirectory } from '../support/temp.js'

// Each finding is made true in a real database (or a Redis of the test's own), `doctor` must name it
// with a non-zero exit, and the ledger is put back so the next test starts clean.

const directory = temporaryDirectory('hookledger-doctor-')
const configPath = join(directory, 'hookledger.config.json')
writeFileSync(
  configPath,
  JSON.stringify({
    sources: [
      {
        id: 'shop',
        verify: { scheme: 'standard-webhooks', secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] },
        handler: { type: 'forward', url: 'http://127.0.0.1:1/hooks' },
      },
      {
        id: 'fan',
        verify: { scheme: 'github', secrets: ['s3cret'] },
        routes: [{ id: 'crm', forward: { url: 'http://127.0.0.1:1/crm' } }],
      },
      // Its handler is registered in code (a forwardHandler): its forwards are operations.
      { id: 'coded', verify: { scheme: 'github', secrets: ['s3cret'] } },
    ],
  }),
)

let db: TestDatabase
/** CI servers may run with autovacuum off (a finding of its own, tested below): ignored elsewhere. */
let serverAutovacuumOff = false

beforeAll(async () => {
  db = await createTestDatabase()
  const [row] = await db.sql<Array<{ on: boolean }>>`select current_setting('autovacuum')::boolean as on`
  serverAutovacuumOff = row?.on === false
}, 60_000)

afterAll(async () => {
  await db.drop()
})

interface Run {
  status: number
  stdout: string
  stderr: string
}

async function doctor(
  args: string[] = [],
  options: {
    redisUrl?: string | null
    clock?: () => number
    strict?: boolean
    databaseUrl?: string
    configPath?: string
  } = {},
): Promise<Run> {
  let stdout = ''
  let stderr = ''
  const redisUrl = options.redisUrl === undefined ? testRedisUrl() : options.redisUrl
  const ignore = serverAutovacuumOff && options.strict !== true ? ['--ignore', 'postgres.autovacuum_off'] : []
  const status = await runDoctorCommand(
    [...args, ...ignore],
    {
      environment: () =>
        readEnvironment({
          DATABASE_URL: options.databaseUrl ?? db.url,
          HOOKLEDGER_CONFIG: options.configPath ?? configPath,
          ...(redisUrl === null ? {} : { REDIS_URL: redisUrl }),
        }),
      ledgerUrl: async (env) => env.DATABASE_URL ?? '',
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    },
    {
      stdout: (text) => {
        stdout += text
      },
      stderr: (text) => {
        stderr += text
      },
    },
  )
  return { status, stdout, stderr }
}

/** Asserts a run found `code` (exit 1, its line present) and returns that line. */
function lineOf(run: Run, code: string): string {
  expect(run.stderr).toBe('')
  expect(run.status).toBe(1)
  const line = run.stdout.split('\n').find((text) => text.includes(` ${code}: `))
  expect(line, run.stdout).toBeDefined()
  return line ?? ''
}

async function insertEvent(
  source: string,
  eventId: string,
  status: string,
  extra: { ago?: string; jobId?: string } = {},
): Promise<string> {
  const ago = extra.ago ?? '0 seconds'
  const [row] = await db.sql<Array<{ id: string }>>`
    insert into inbound_events (source, event_id, payload_hash, headers, status, received_at,
      updated_at, processed_at, enqueued_at, job_id)
    values (${source}, ${eventId}, 'h', '{}'::jsonb, ${status}::event_status,
      now() - ${ago}::interval, now() - ${ago}::interval,
      case when ${status} = 'done' then now() end, now() - ${ago}::interval, ${extra.jobId ?? null})
    returning id`
  if (row === undefined) throw new Error('no event inserted')
  return row.id
}

async function insertOperation(
  key: string,
  status: string,
  extra: { tool?: string; leaseAgo?: string; updatedAgo?: string } = {},
): Promise<string> {
  const [row] = await db.sql<Array<{ id: string }>>`
    insert into operations (operation_key, tool, effect_class, payload_hash, args, status, attempts,
      lease_until, updated_at)
    values (${key}, ${extra.tool ?? 'forward'}, 'idempotent', 'h', '{}'::jsonb, ${status}::operation_status, 1,
      case when ${extra.leaseAgo ?? null}::text is null then null else now() - ${extra.leaseAgo ?? '0 s'}::interval end,
      now() - ${extra.updatedAgo ?? '0 seconds'}::interval)
    returning id`
  if (row === undefined) throw new Error('no operation inserted')
  await db.sql`insert into operation_attempts (operation_id, attempt, attempt_key, status)
    values (${row.id}, 1, ${key}, ${status === 'completed' ? 'succeeded' : 'in_flight'}::attempt_status)`
  return row.id
}

/** Removes every row the tests add (operation_audit keeps its rows: nothing reads them here). */
async function clean() {
  await db.sql`delete from operations`
  await db.sql`delete from inbound_events`
  await db.sql`delete from source_dedup_keys`
}

describe('hookledger doctor', () => {
  it('passes a clean ledger with one ok line and exit 0', async () => {
    // A source's own forward keeps no operation: its DONE event is its record.
    await insertEvent('shop', 'evt_fine', 'done')
    // An event id with ':' is encoded in its route's key (stepKey): still matched, so not a finding.
    const routed = await insertEvent('fan', 'evt:colon', 'done')
    await db.sql`insert into event_routes (event_row_id, route_id, status) values (${routed}, 'crm', 'done')`
    await insertOperation('fan:evt%3Acolon:route:crm', 'completed')
    const run = await doctor()
    expect(run.stderr).toBe('')
    expect(run.stdout).toMatch(/^ok: 12 checks, no findings( \(ignored: postgres\.autovacuum_off\))?\n$/)
    expect(run.status).toBe(0)
    await clean()
  })

  it('says it skipped the queue checks in the in-process mode', async () => {
    const run = await doctor([], { redisUrl: null })
    expect(run.status).toBe(0)
    expect(run.stdout).toContain('pending_without_job: skipped: REDIS_URL is unset')
  })

  it('answers --help and -h with its usage', async () => {
    for (const flag of ['--help', '-h']) {
      const run = await doctor([flag])
      expect(run.status).toBe(0)
      expect(run.stdout).toContain('hookledger doctor [--json]')
    }
  })

  it('refuses a malformed option with exit 2', async () => {
    const run = await doctor(['--reconciliation-bound', 'soon'])
    expect(run.status).toBe(2)
    expect(run.stderr).toContain('--reconciliation-bound must be a span')
  })

  it('finds DONE events whose route operation is not completed, or missing', async () => {
    const routed = await insertEvent('fan', 'evt_routed', 'done')
    await db.sql`insert into event_routes (event_row_id, route_id, status) values (${routed}, 'crm', 'done')`
    await insertOperation('fan:evt_routed:route:crm', 'failed')
    const unrecorded = await insertEvent('fan', 'evt_missing', 'done')
    await db.sql`insert into event_routes (event_row_id, route_id, status) values (${unrecorded}, 'crm', 'done')`
    // A source's own forward is sent outside the ledger: no operation is expected of its DONE events,
    // and one an earlier version left open is not this version's to settle.
    await insertEvent('shop', 'evt_forwarded', 'done')
    await insertEvent('shop', 'evt_exhausted', 'done')
    await insertOperation('shop:evt_exhausted:forward', 'exhausted')
    // A forward in code is an operation: one not completed under a DONE event is a finding.
    await insertEvent('coded', 'evt_code_fwd', 'done')
    await insertOperation('coded:evt_code_fwd:forward', 'exhausted')
    const line = lineOf(await doctor(), 'events.done_unsettled')
    expect(line).toContain('3 DONE event(s)')
    expect(line).toContain('fan:evt_routed:route:crm (failed)')
    expect(line).toContain('fan:evt_missing:route:crm (no operation)')
    expect(line).toContain('coded:evt_code_fwd:forward (exhausted)')
    expect(line).not.toContain('shop:')
    expect(line).toContain('fix: ')
    await clean()
  })

  it('finds in_progress operations whose lease ran out long ago', async () => {
    await insertOperation('agents/charge-1', 'in_progress', { tool: 'charge', leaseAgo: '1 hour' })
    // A lease that ran out a moment ago is the normal crash window, within the margin.
    await insertOperation('agents/charge-2', 'in_progress', { tool: 'charge', leaseAgo: '10 seconds' })
    // A source's own forward an earlier version left claimed: nothing invokes it again, and its
    // event's row decides, so it is not a finding. A forward in code is.
    await insertOperation('shop:evt_left:forward', 'in_progress', { leaseAgo: '1 hour' })
    await insertOperation('coded:evt_left:forward', 'in_progress', { leaseAgo: '1 hour' })
    const line = lineOf(await doctor(), 'operations.stale_lease')
    expect(line).toContain('2 operation(s)')
    expect(line).toContain('agents/charge-1 (newest attempt: in_flight)')
    expect(line).toContain('coded:evt_left:forward')
    expect(line).not.toContain('charge-2')
    expect(line).not.toContain('shop:')
    // A bounded read says its count is a lower bound.
    await insertOperation('agents/charge-3', 'in_progress', { tool: 'charge', leaseAgo: '2 hours' })
    const bounded = lineOf(await doctor(['--scan-limit', '1']), 'operations.stale_lease')
    expect(bounded).toContain('at least 1 operation(s)')
    await clean()
  })

  it('finds needs_reconciliation older than the bound', async () => {
    await insertOperation('agents/ship-1', 'needs_reconciliation', { tool: 'ship', updatedAgo: '2 hours' })
    await insertOperation('agents/ship-2', 'needs_reconciliation', { tool: 'ship', updatedAgo: '10 minutes' })
    const line = lineOf(await doctor(), 'operations.stale_reconciliation')
    expect(line).toContain('1 operation(s) have been needs_reconciliation for over 1 h')
    expect(line).toContain('agents/ship-1')
    const tighter = lineOf(await doctor(['--reconciliation-bound', '5m']), 'operations.stale_reconciliation')
    expect(tighter).toContain('2 operation(s)')
    await clean()
  })

  it('finds attempts without their operation or event, and a foreign key that is off', async () => {
    const missingOperation = randomUUID()
    // An id of now: attempts are partitioned by their event's id, and only now's period exists.
    const [made] = await db.sql<Array<{ id: string }>>`select hookledger_uuid_v7(now())::text as id`
    const missingEvent = String(made?.id)
    // What a restore with triggers disabled does: the foreign keys do not fire.
    await db.sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`insert into operation_attempts (operation_id, attempt, attempt_key) values (${missingOperation}, 1, 'k')`
      await tx`insert into event_attempts (event_row_id, attempt, outcome, started_at) values (${missingEvent}, 1, 'error', now())`
    })
    await db.sql`alter table operation_attempts disable trigger all`
    try {
      const run = await doctor()
      expect(lineOf(run, 'operations.orphan_attempts')).toContain(`operations ${missingOperation}`)
      expect(lineOf(run, 'events.orphan_attempts')).toContain(`inbound_events ${missingEvent}`)
      expect(lineOf(run, 'schema.foreign_key_off')).toContain('operation_attempts.operation_id → operations')
    } finally {
      await db.sql`alter table operation_attempts enable trigger all`
      await db.sql`delete from operation_attempts where operation_id = ${missingOperation}`
      await db.sql`delete from event_attempts where event_row_id = ${missingEvent}`
    }
  })

  it('finds PENDING rows that have no job in BullMQ for longer than the relay window', async () => {
    const lost = await insertEvent('shop', 'evt_lost', 'pending', { ago: '1 hour', jobId: 'evts-gone' })
    const queued = await insertEvent('shop', 'evt_queued', 'pending', { ago: '1 hour' })
    await insertEvent('shop', 'evt_new', 'pending')
    const queue = new Queue(INBOUND_QUEUE, {
      connection: { url: testRedisUrl() },
      prefix: deploymentQueuePrefix(db.deploymentId),
    })
    try {
      const job = processEventJob(queued)
      await queue.add(job.name, job.data, job.opts)
      const line = lineOf(await doctor(), 'queue.pending_without_job')
      expect(line).toContain('1 PENDING row(s)')
      expect(line).toContain(lost)
      expect(line).not.toContain(queued)
      expect(line).toContain(`prefix ${deploymentQueuePrefix(db.deploymentId)}`)
    } finally {
      await queue.obliterate({ force: true })
      await queue.close()
      await clean()
    }
  })

  it('finds a dedup key changed without a new version', async () => {
    await insertEvent('shop', 'evt_keyed', 'done')
    await db.sql`insert into source_dedup_keys (source, version, definition)
      values ('shop', 1, ${JSON.stringify({ parts: [{ pointer: '/data/id' }], scope: null })}::jsonb)`
    const line = lineOf(await doctor(), 'config.dedup_key_changed')
    expect(line).toContain("source 'shop': dedupKey differs")
    await clean()
  })

  it('finds a Redis that may evict', async () => {
    const redis = await startRedisServer()
    const client = new Redis(redis.url)
    try {
      await client.config('SET', 'maxmemory-policy', 'allkeys-lru')
      const line = lineOf(await doctor([], { redisUrl: redis.url }), 'redis.eviction')
      expect(line).toContain('maxmemory-policy is allkeys-lru')
    } finally {
      client.disconnect()
      await redis.stop()
    }
  })

  it('reads the policy from INFO memory where CONFIG is renamed away (managed Redis)', async () => {
    const redis = await startRedisServer(undefined, [
      '--maxmemory-policy',
      'volatile-lru',
      '--rename-command',
      'CONFIG',
      '',
    ])
    try {
      const line = lineOf(await doctor([], { redisUrl: redis.url }), 'redis.eviction')
      expect(line).toContain('maxmemory-policy is volatile-lru')
    } finally {
      await redis.stop()
    }
  })

  it('finds an unreachable Redis as one finding', async () => {
    const line = lineOf(await doctor([], { redisUrl: 'redis://127.0.0.1:1' }), 'redis.unreachable')
    expect(line).toContain('Redis did not answer')
  })

  it('finds a Redis whose path went silent (sockets open, nothing answered) as unreachable, not hanging', async () => {
    const redis = await startRedisServer()
    const proxy = await startTcpProxy({ host: '127.0.0.1', port: redis.port })
    proxy.blackhole()
    try {
      // Each connection is given up after 5 s of silence (src/queue/connections.ts); before that
      // limit the check waited for ever.
      const line = lineOf(await doctor([], { redisUrl: proxy.urlFor(redis.url) }), 'redis.unreachable')
      expect(line).toContain('Redis did not answer')
    } finally {
      await proxy.close()
      await redis.stop()
    }
  }, 45_000)

  it('finds an unreachable PostgreSQL as one finding, and still checks Redis', async () => {
    const run = await doctor([], { databaseUrl: 'postgres://postgres@127.0.0.1:1/none' })
    expect(lineOf(run, 'postgres.unreachable')).toContain('PostgreSQL did not answer')
    expect(run.stdout.trim().split('\n')).toHaveLength(1)
  })

  it('finds synchronous_commit off for the database', async () => {
    await db.sql.unsafe(`alter database "${db.name}" set synchronous_commit = off`)
    try {
      lineOf(await doctor(), 'postgres.synchronous_commit_off')
    } finally {
      await db.sql.unsafe(`alter database "${db.name}" reset synchronous_commit`)
    }
  })

  it('finds the ledger read-only (a standby, or default_transaction_read_only)', async () => {
    // In a read-write transaction: the sessions opened after the first statement are read-only.
    const setReadOnly = (on: boolean) =>
      db.sql.begin('read write', (tx) =>
        tx.unsafe(
          on
            ? `alter database "${db.name}" set default_transaction_read_only = on`
            : `alter database "${db.name}" reset default_transaction_read_only`,
        ),
      )
    await setReadOnly(true)
    try {
      const run = await doctor()
      expect(lineOf(run, 'postgres.read_only')).toContain('503 ledger_read_only')
      expect(run.status).toBe(1)
    } finally {
      await setReadOnly(false)
    }
    expect(await doctor()).toMatchObject({ status: 0 })
  })

  it('finds JIT on for the database (migration 0018 turned it off)', async () => {
    await db.sql.unsafe(`alter database "${db.name}" set jit = on`)
    try {
      expect(lineOf(await doctor(), 'postgres.jit_on')).toContain('JIT is on for this database')
    } finally {
      await db.sql.unsafe(`alter database "${db.name}" set jit = off`)
    }
  })

  it('finds autovacuum off on the server, and says an ignored finding was ignored', async () => {
    const run = await doctor([], { strict: true })
    if (serverAutovacuumOff) {
      expect(lineOf(run, 'postgres.autovacuum_off')).toContain('autovacuum=off')
      const ignored = await doctor(['--ignore', 'postgres.autovacuum_off'], { strict: true })
      expect(ignored.stdout).toMatch(/^ok: \d+ checks, no findings \(ignored: postgres\.autovacuum_off\)\n$/)
      expect(ignored.status).toBe(0)
    } else {
      expect(run.status).toBe(0)
    }
  })

  it('finds autovacuum turned off on a ledger table', async () => {
    await db.sql`alter table operations set (autovacuum_enabled = false)`
    try {
      expect(lineOf(await doctor(), 'postgres.table_autovacuum_off')).toContain('operations')
    } finally {
      await db.sql`alter table operations reset (autovacuum_enabled)`
    }
  })

  it('finds a ledger whose partitions end within a day, or cover no longer now', async () => {
    const [generation] = await db.sql<Array<{ suffix: string; ends: string }>>`
      select suffix, ends::text from inbound_key_generations order by starts desc limit 1`
    await db.sql`update inbound_key_generations set ends = now() + interval '3 hours' where suffix = ${String(generation?.suffix)}`
    try {
      expect(lineOf(await doctor(), 'ledger.partitions_short')).toMatch(
        /end within a day.*dedup key generations \(inbound_key_generations\): end in 3\.0 h/,
      )
      await db.sql`update inbound_key_generations set ends = now() - interval '1 minute' where suffix = ${String(generation?.suffix)}`
      expect(lineOf(await doctor(), 'ledger.partitions_short')).toContain('no partition covers now')
    } finally {
      await db.sql`update inbound_key_generations set ends = ${String(generation?.ends)}::timestamptz where suffix = ${String(generation?.suffix)}`
    }
  })

  it('finds pools that need more connections than max_connections allows', async () => {
    const line = lineOf(await doctor(['--processes', 'api=2,worker=8']), 'postgres.max_connections')
    // Each process's pool, its 4 generic-plan connections and its migration connection, plus 2:
    // 2 × (10 + 4 + 1) + 8 × (12 + 4 + 1) + 2 = 168, over the server's 100 less its reserved slots.
    expect(line).toContain('need up to 168 connections')

    // A ledger of more than 40 periods has no generic-plan connections (GENERIC_PLAN_MAX_PERIODS):
    // 2 × (10 + 1) + 8 × (12 + 1) + 2 = 128.
    const manyPeriods = join(directory, 'many-periods.config.json')
    writeFileSync(
      manyPeriods,
      JSON.stringify({
        retention: { dedupWindowDays: 60 },
        sources: [
          {
            id: 'shop',
            verify: { scheme: 'standard-webhooks', secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] },
            handler: { type: 'forward', url: 'http://127.0.0.1:1/hooks' },
            retentionDays: 60,
          },
        ],
      }),
    )
    const fewer = lineOf(
      await doctor(['--processes', 'api=2,worker=8'], { configPath: manyPeriods }),
      'postgres.max_connections',
    )
    expect(fewer).toContain('need up to 128 connections')
  })

  it("finds this host's clock off PostgreSQL's beyond the tolerance's margin", async () => {
    const ahead = lineOf(await doctor([], { clock: () => Date.now() + 60_000 }), 'clock.skew')
    expect(ahead).toMatch(/^warning clock\.skew: this host's clock is 60\.\d s ahead of PostgreSQL's/)
    expect(ahead).toContain("300 s, source 'shop'")
    const behind = lineOf(await doctor([], { clock: () => Date.now() - 400_000 }), 'clock.skew')
    expect(behind).toMatch(/^error clock\.skew: .* behind/)
  })

  it('finds pending migrations', async () => {
    const [last] = await db.sql<Array<{ id: number; hash: string; created_at: string }>>`
      select id, hash, created_at::text from drizzle.__drizzle_migrations order by created_at desc limit 1`
    if (last === undefined) throw new Error('the test database has no migrations')
    await db.sql`delete from drizzle.__drizzle_migrations where id = ${last.id}`
    try {
      // The newest migration of the journal, whichever it is: the row deleted above was its record.
      const journal = JSON.parse(
        readFileSync(fileURLToPath(new URL('../../migrations/meta/_journal.json', import.meta.url)), 'utf8'),
      ) as { entries: Array<{ tag: string; when: number }> }
      const newest = journal.entries.reduce((a, b) => (b.when > a.when ? b : a))
      expect(lineOf(await doctor(), 'migrations.pending')).toContain(newest.tag)
    } finally {
      await db.sql`insert into drizzle.__drizzle_migrations (id, hash, created_at)
        values (${last.id}, ${last.hash}, ${last.created_at}::bigint)`
    }
  })

  it('prints one JSON document with --json', async () => {
    await insertOperation('agents/charge-9', 'in_progress', { tool: 'charge', leaseAgo: '1 hour' })
    const run = await doctor(['--json'])
    expect(run.status).toBe(1)
    const report = JSON.parse(run.stdout) as DoctorReport
    expect(report.ok).toBe(false)
    expect(report.counts).toMatchObject({ findings: 1, errors: 1, warnings: 0, checks: 12 })
    expect(report.findings[0]).toMatchObject({
      code: 'operations.stale_lease',
      severity: 'error',
      count: 1,
      examples: ['agents/charge-9 (newest attempt: in_flight)'],
    })
    expect(report.findings[0]?.fix).toEqual(expect.any(String))
    await clean()
    const clean_ = JSON.parse((await doctor(['--json'])).stdout) as DoctorReport
    expect(clean_).toMatchObject({ ok: true, findings: [] })
  })
})

describe('hookledger doctor, as the CLI runs it', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url))

  /** The real entry point as a child process (main.ts registers the command). */
  async function runCli(args: string[]): Promise<Run> {
    const run = await runCommand(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'doctor', ...args],
      {
        cwd: ROOT,
        env: { DATABASE_URL: db.url, REDIS_URL: testRedisUrl(), HOOKLEDGER_CONFIG: configPath },
      },
    )
    return { ...run, status: run.status ?? -1 }
  }

  it('answers --help, exits 1 with a finding and 0 on a clean ledger', async () => {
    await insertOperation('agents/charge-cli', 'in_progress', { tool: 'charge', leaseAgo: '1 hour' })
    const ignore = serverAutovacuumOff ? ['--ignore', 'postgres.autovacuum_off'] : []
    // Children run at once: each spends seconds compiling.
    const [help, dirty] = await Promise.all([runCli(['--help']), runCli(ignore)])
    expect(help.status).toBe(0)
    expect(help.stdout).toContain('hookledger doctor [--json]')
    expect(dirty.stderr).toBe('')
    expect(dirty.status).toBe(1)
    expect(dirty.stdout).toMatch(
      /^error operations\.stale_lease: 1 operation\(s\) .*agents\/charge-cli.*; fix: /m,
    )
    await clean()
    const fine = await runCli(['--json', ...ignore])
    expect(fine.status).toBe(0)
    expect(JSON.parse(fine.stdout)).toMatchObject({ ok: true, findings: [] })
  }, 60_000)
})
