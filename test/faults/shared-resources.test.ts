import { Redis } from 'ioredis'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ledgerPoolSize } from '../../src/db/client.js'
import { prefixOwnerKey } from '../../src/queue/prefix-owner.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { adminDatabaseUrl, testRedisUrl } from '../support/env.js'
import { startTestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { testConfig, uniquePrefix } from '../support/stack.js'

let first: TestDatabase
let second: TestDatabase
let redis: Redis
let admin: postgres.Sql
const prefixes: string[] = []

beforeAll(async () => {
  first = await createTestDatabase()
  second = await createTestDatabase()
  // The test reads pg_stat_activity per database: the helpers' own pools must not count.
  await first.sql.end()
  await second.sql.end()
  redis = new Redis(testRedisUrl())
  admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
})
afterAll(async () => {
  for (const prefix of prefixes) {
    const keys = await redis.keys(`${prefix}:*`)
    if (keys.length > 0) await redis.del(...keys)
  }
  redis.disconnect()
  await admin.end()
  await first.drop()
  await second.drop()
})

describe('two deployments with the same fixed queue.prefix', () => {
  it('the second refuses to start, naming the deployment that owns the prefix; the owner restarts', async () => {
    const prefix = uniquePrefix()
    prefixes.push(prefix)
    const config = testConfig({ queue: { prefix } })
    const owner = await startTestService({ database: first, config, role: 'api' })
    await owner.close()
    expect(await redis.get(prefixOwnerKey(prefix))).toBe(first.deploymentId)

    await expect(startTestService({ database: second, config, role: 'api' })).rejects.toThrow(
      `queue.prefix: '${prefix}' belongs to deployment ${first.deploymentId}`,
    )
    // The owner itself starts again on its prefix.
    const again = await startTestService({ database: first, config, role: 'api' })
    await again.close()
  })
})

describe('PostgreSQL connections per process', () => {
  async function serviceConnectionsTo(database: TestDatabase): Promise<number> {
    const [row] = await admin<Array<{ n: number }>>`
      select count(*)::int as n from pg_stat_activity
      where datname = ${database.name} and application_name = 'hookledger'`
    return row?.n ?? 0
  }

  it('stay within database.poolSize while every request waits on the database', async () => {
    const running = await startTestService({
      database: second,
      config: testConfig({ database: { poolSize: 3 } }),
      role: 'api',
    })
    // Holds inbound_events locked, so every claim batch keeps its connection until the lock goes.
    const locker = postgres(second.url, { max: 1, connection: { application_name: 'test-lock' } })
    const lock = await locker.reserve()
    try {
      await lock`begin`
      await lock`lock table inbound_events in access exclusive mode`
      const deliveries: Array<Promise<number>> = []
      for (let n = 0; n < 12; n += 1) {
        const body = `{"type":"pool","n":${n}}`
        deliveries.push(
          fetch(`${running.url}/webhooks/acme`, {
            method: 'POST',
            body,
            headers: signedHeaders(body, { id: `evt_pool_${n}` }),
          }).then((answer) => answer.status),
        )
        // Apart enough that each delivery is its own claim batch, wanting its own connection.
        await new Promise((resolve) => setTimeout(resolve, 25))
      }
      await expect.poll(() => serviceConnectionsTo(second), { timeout: 5000 }).toBeGreaterThanOrEqual(3)
      // Give a pool that would grow the time to do so; the default (10) would hold 10 here.
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(await serviceConnectionsTo(second)).toBe(3)
      await lock`commit`
      expect(await Promise.all(deliveries)).toEqual(Array.from({ length: 12 }, () => 200))
    } finally {
      lock.release()
      await locker.end()
      await running.close()
    }
  })

  it('default to 10 for the api, concurrency + 4 for the worker, concurrency + 8 for both', () => {
    const sizes = (runsApi: boolean, runsWorker: boolean) =>
      ledgerPoolSize({ configured: undefined, runsApi, runsWorker, workerConcurrency: 8 })
    expect(sizes(true, false)).toBe(10)
    expect(sizes(false, true)).toBe(12)
    expect(sizes(true, true)).toBe(16)
  })

  it('refuse a pool too small for the worker to make progress', async () => {
    await expect(
      startTestService({
        database: second,
        config: testConfig({ database: { poolSize: 5 }, worker: { concurrency: 8 } }),
        role: 'worker',
      }),
    ).rejects.toThrow('database.poolSize: must be at least worker.concurrency + 2 (10)')
  })
})
