import { Redis } from 'ioredis'
import postgres from 'postgres'
import { buildIfStale } from '../../scripts/build-if-stale.mjs'
import { adminDatabaseUrl, testRedisUrl } from './env.js'

/**
 * Fails the run at once, with a clear message, when the stores the suite needs are not up; then
 * builds dist/ once if a source is newer, since child processes (crash tests, the CLI, the
 * examples) run the built code rather than compiling TypeScript each time one starts.
 */
export default async function prepareIntegrationRun() {
  const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {}, connect_timeout: 5 })
  try {
    await admin`select 1`
  } catch (error) {
    throw new Error(`PostgreSQL is not reachable at ${adminDatabaseUrl()}: ${(error as Error).message}`)
  } finally {
    await admin.end({ timeout: 5 })
  }
  const redis = new Redis(testRedisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await redis.connect()
    await redis.ping()
  } catch (error) {
    throw new Error(`Redis is not reachable at ${testRedisUrl()}: ${(error as Error).message}`)
  } finally {
    redis.disconnect()
  }
  buildIfStale()
}
