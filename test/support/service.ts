import type { Config } from '../../src/config/config.js'
import { readEnvironment } from '../../src/config/env.js'
import { createLogger, type Logger } from '../../src/logger.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import type { Tool } from '../../src/outbound/tools.js'
import { type Role, type Service, startService } from '../../src/service/service.js'
import { createTestDatabase, type TestDatabase } from './database.js'
import { testRedisUrl } from './env.js'
import { testConfig } from './stack.js'

export interface TestService {
  service: Service
  database: TestDatabase
  url: string
  close(): Promise<void>
}

/** The whole service in this process (api, worker and relay) on its own database and queue prefix. */
export async function startTestService(
  options: {
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
    /** Silent unless given (a captured logger, for tests that assert what is logged). */
    logger?: Logger
  } = {},
): Promise<TestService> {
  const database = options.database ?? (await createTestDatabase())
  const env = readEnvironment({
    DATABASE_URL: database.url,
    REDIS_URL: options.inProcessQueue === true ? undefined : (options.redisUrl ?? testRedisUrl()),
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    ...options.env,
  })
  const service = await startService({
    env,
    config: options.config ?? testConfig(),
    role: options.role ?? 'all',
    handlers: options.handlers ?? {},
    logger: options.logger ?? createLogger('silent'),
    tools: options.tools ?? [],
  })
  return {
    service,
    database,
    url: service.url,
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
