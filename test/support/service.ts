import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll } from 'vitest'
import type { Config } from '../../src/config/config.js'
import { readEnvironment } from '../../src/config/env.js'
import type { FailpointName } from '../../src/failpoints.js'
import { createLogger, type Logger } from '../../src/logger.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import type { Tool } from '../../src/outbound/tools.js'
import { type Role, type Service, startService } from '../../src/service/service.js'
import { type Child, startChild } from './child.js'
import { createTestDatabase, type TestDatabase } from './database.js'
import { testRedisUrl } from './env.js'
import { captureLogs } from './log-capture.js'
import { testConfig } from './stack.js'
import { temporaryDirectory } from './temp.js'

export interface TestService {
  service: Service
  database: TestDatabase
  url: string
  /** What the service logged at info and above, unless the test gave its own logger. */
  logged(): string
  close(): Promise<void>
}

export interface TestServiceOptions {
  config?: Config
  handlers?: Record<string, EventHandler>
  role?: Role
  redisUrl?: string
  /** No REDIS_URL at all: the service runs its in-process queue. */
  inProcessQueue?: boolean
  database?: TestDatabase
  /** More variables for the service's environment (ADMIN_TOKEN, AGENT_TOKEN, …). */
  env?: Record<string, string>
  tools?: readonly Tool<never, unknown>[]
  /** Kept in memory at info level unless given (a captured logger, for tests that assert what is logged). */
  logger?: Logger
}

/** The whole service in this process (api, worker and relay) on its own database and queue prefix. */
export async function startTestService(options: TestServiceOptions = {}): Promise<TestService> {
  const database = options.database ?? (await createTestDatabase())
  const env = readEnvironment({
    DATABASE_URL: database.url,
    REDIS_URL: options.inProcessQueue === true ? undefined : (options.redisUrl ?? testRedisUrl()),
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    ...options.env,
  })
  const captured = options.logger === undefined ? captureLogs('info') : undefined
  const service = await startService({
    env,
    config: options.config ?? testConfig(),
    role: options.role ?? 'all',
    handlers: options.handlers ?? {},
    logger: options.logger ?? captured?.logger ?? createLogger('silent'),
    tools: options.tools ?? [],
  })
  return {
    service,
    database,
    url: service.url,
    logged: () => captured?.text() ?? '',
    async close() {
      await service.close()
      if (options.database === undefined) await database.drop()
    },
  }
}

/** Worker settings that make retries and takeovers happen within a test's patience. */
export const FAST_WORKER = {
  concurrency: 4,
  maxAttempts: 3,
  backoffBaseMs: 50,
  backoffMaxMs: 200,
  handlerTimeoutMs: 2000,
  leaseMs: 3000,
  stalledIntervalMs: 1000,
}

export const FAST_RELAY = { intervalMs: 200, graceMs: 300, orphanAfterMs: 2000 }

/**
 * The worker and outbound settings of a service whose attempts a fault cuts short (a reset, a
 * blackhole, a failover): attempts to spare, since an interrupted attempt counts as one, and a forward
 * cut short keeps its operation leased (its tool's timeout + 5 s) while later attempts wait for it.
 * The statement timeouts stay the defaults: they are what the blackhole tests are about.
 */
export const FAULT_TOLERANT = {
  worker: {
    concurrency: 4,
    maxAttempts: 20,
    backoffBaseMs: 100,
    backoffMaxMs: 1000,
    handlerTimeoutMs: 3000,
    leaseMs: 4000,
    stalledIntervalMs: 1000,
  },
  outbound: { leaseMs: 1500, backoffMaxMs: 1000 },
  relay: FAST_RELAY,
}

export interface ServiceHarness {
  /** The file's database, made in `beforeAll`. */
  readonly database: TestDatabase
  /** The file's temporary folder: config files, and the crash server's `invocations.log`. */
  readonly directory: string
  /** `config.json` in the folder: the `config` option, and what `startChild` runs with unless told. */
  readonly configPath: string
  /** Writes one more config file into the folder; returns its path. */
  writeConfig(config: object, name: string): string
  /** The whole service in this process (`startTestService`) on the file's database. */
  start(options?: Omit<TestServiceOptions, 'database'>): Promise<TestService>
  /**
   * A process (`hookledger serve` unless `entry` says) on the file's database, the test Redis and
   * `configPath`, once it answers /healthz.
   */
  startChild(options?: {
    entry?: readonly string[]
    env?: Record<string, string>
    failpoint?: FailpointName
    configPath?: string
  }): Promise<Child>
}

/**
 * A test file's service harness: a database of its own, and every service a test starts, in this
 * process or as a child (the crash and fault tests), closed once that test is over (the file, with
 * `keepBetweenTests`). Called at a file's top level, after the `beforeAll` that makes what the config
 * names (a sink, a proxy): hooks run in the order they were registered, and end in reverse.
 */
export function serviceHarness(
  options: {
    /** Runs on the new database before anything starts (the tables a code handler writes). */
    setup?: (database: TestDatabase) => Promise<unknown>
    /** The temporary folder's name prefix. */
    folder?: string
    /** Written to `configPath` in `beforeAll`; a function when it names what an earlier hook made. */
    config?: object | (() => object)
    /** Variables every child gets: LOG_LEVEL, or REDIS_URL '' for the in-process queue. */
    env?: Record<string, string>
    /** One service serves the whole file, started in its `beforeAll`. */
    keepBetweenTests?: boolean
  } = {},
): ServiceHarness {
  const directory = temporaryDirectory(options.folder ?? 'hookledger-service-')
  const configPath = join(directory, 'config.json')
  let database: TestDatabase | undefined
  const made = () => {
    if (database === undefined) throw new Error('the database is made in beforeAll')
    return database
  }
  const running: Array<{ close(): Promise<unknown>; logged?: () => string }> = []
  const closeAll = async () => {
    await Promise.all(running.splice(0).map((service) => service.close()))
  }

  beforeAll(async () => {
    database = await createTestDatabase()
    await options.setup?.(database)
    const { config } = options
    if (config !== undefined) {
      writeFileSync(configPath, JSON.stringify(typeof config === 'function' ? config() : config))
    }
  })
  if (options.keepBetweenTests !== true) {
    afterEach(async (context) => {
      // A poll that timed out says only what it last saw: before the failed test's services stop,
      // print what they logged and what the database was doing (who waits on which lock).
      if ((context.task.result?.errors?.length ?? 0) > 0 && running.length > 0) {
        for (const service of running) console.error(`a service's log:\n${service.logged?.() ?? '(a child)'}`)
        console.error(`the database's sessions:\n${JSON.stringify(await sessions(made()), null, 1)}`)
      }
      await closeAll()
    })
  }
  afterAll(async () => {
    await closeAll()
    await database?.drop()
  })

  return {
    get database() {
      return made()
    },
    directory,
    configPath,
    writeConfig(config, name) {
      const path = join(directory, name)
      writeFileSync(path, JSON.stringify(config))
      return path
    },
    async start(start = {}) {
      const service = await startTestService({ ...start, database: made() })
      running.push(service)
      return service
    },
    async startChild(start = {}) {
      const child = await startChild([...(start.entry ?? ['bin/hookledger.js', 'serve'])], {
        DATABASE_URL: made().url,
        REDIS_URL: testRedisUrl(),
        HOOKLEDGER_CONFIG: start.configPath ?? configPath,
        // Where test/support/crash-server.mjs logs each handler start (crashWitness reads it).
        TEST_INVOCATION_LOG: join(directory, 'invocations.log'),
        ...options.env,
        ...start.env,
        ...(start.failpoint === undefined ? {} : { HOOKLEDGER_FAILPOINT: start.failpoint }),
      })
      running.push({ close: () => child.kill() })
      return child
    },
  }
}

/** The database's sessions but the one asking: what each runs or waits for, and the locks it waits on. */
async function sessions(database: TestDatabase) {
  return database.sql`
    select a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
           pg_blocking_pids(a.pid) as blocked_by, now() - a.xact_start as in_transaction_for,
           left(a.query, 300) as query,
           (select array_agg(l.mode || ' on ' || coalesce(l.relation::regclass::text, l.locktype))
            from pg_locks l where l.pid = a.pid and not l.granted) as waiting_for
    from pg_stat_activity a
    where a.datname = current_database() and a.pid <> pg_backend_pid()`
}
