import { randomBytes } from 'node:crypto'
import { Queue } from 'bullmq'
import { Redis } from 'ioredis'
import type { Config } from '../../src/config/config.js'
import { createClaimBatcher } from '../../src/db/claims.js'
import { noFailpoints } from '../../src/failpoints.js'
import { createApp } from '../../src/http/app.js'
import { createLogger, type Logger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { bullmqJobQueue } from '../../src/queue/bullmq.js'
import { createEnqueuer } from '../../src/queue/enqueuer.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventJobOptions } from '../../src/queue/jobs.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from './database.js'
import { testRedisUrl } from './env.js'
import { TEST_SECRET } from './signing.js'

/** A queue prefix no other test, run or deployment uses. */
export function uniquePrefix(): string {
  return `hl-test-${randomBytes(6).toString('hex')}`
}

export function testConfig(
  overrides: Record<string, unknown> = {},
  sourceOverrides: Record<string, unknown> = {},
): Config {
  return buildConfig(
    {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
          ...sourceOverrides,
        },
      ],
      ...overrides,
    },
    () => undefined,
  )
}

export interface ApiStack {
  database: TestDatabase
  queue: Queue<ProcessEventData>
  app: ReturnType<typeof createApp>
  close(): Promise<void>
}

/** The HTTP app on a database and queue of its own, driven with `app.request()`. */
export async function createApiStack(
  config: Config = testConfig(),
  options: { adminToken?: string; agentToken?: string; dashboard?: boolean; logger?: Logger } = {},
): Promise<ApiStack> {
  const database = await createTestDatabase()
  const logger = options.logger ?? createLogger('silent')
  const connection = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1, enableOfflineQueue: false })
  const queue = new Queue<ProcessEventData>(INBOUND_QUEUE, {
    connection,
    prefix: uniquePrefix(),
    defaultJobOptions: processEventJobOptions,
  })
  const enqueuer = createEnqueuer({
    queue: bullmqJobQueue(queue),
    sql: database.sql,
    logger,
    failpoints: noFailpoints,
  })
  const claims = createClaimBatcher(database.sql)
  const app = createApp({
    config,
    db: database.db,
    claims,
    enqueuer,
    logger,
    metrics: createMetrics(),
    readiness: [],
    adminToken: options.adminToken,
    agentToken: options.agentToken,
    dashboardQueues: options.dashboard === true ? [queue] : undefined,
  })
  return {
    database,
    queue,
    app,
    async close() {
      await enqueuer.drain()
      await queue.obliterate({ force: true })
      await queue.close()
      connection.disconnect()
      await database.drop()
    },
  }
}
