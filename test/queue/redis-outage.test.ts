import { sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inboundEvents } from '../../src/db/schema.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startRedisServer } from '../support/redis-server.js'
import { FAST_RELAY, FAST_WORKER, startTestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { testConfig } from '../support/stack.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
  await database.sql`create table handler_effects (event_id text not null)`
})
afterAll(async () => {
  await database.drop()
})

describe('Redis outage', () => {
  it('events arriving while Redis is down all get 200, and all reach DONE once it is back', async () => {
    let redis = await startRedisServer()
    const handler: EventHandler = async ({ eventId, tx }) => {
      await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
    }
    const running = await startTestService({
      database,
      redisUrl: redis.url,
      config: testConfig({ worker: FAST_WORKER, relay: FAST_RELAY }, { handler: undefined }),
      handlers: { acme: handler },
    })
    try {
      const send = async (eventId: string) => {
        const body = JSON.stringify({ type: 'outage.test', eventId })
        const started = Date.now()
        const response = await fetch(`${running.url}/webhooks/acme`, {
          method: 'POST',
          body,
          headers: signedHeaders(body, { id: eventId }),
        })
        return { status: response.status, ms: Date.now() - started }
      }
      const before = await Promise.all(Array.from({ length: 5 }, (_, i) => send(`evt_before_${i}`)))
      await redis.stop()
      const during = await Promise.all(Array.from({ length: 30 }, (_, i) => send(`evt_during_${i}`)))
      for (const result of [...before, ...during]) expect(result.status).toBe(200)
      // Not a benchmark: a hang check. The answer must not wait for Redis to come back.
      expect(Math.max(...during.map((r) => r.ms))).toBeLessThan(2000)
      const pending = await database.db.select().from(inboundEvents)
      expect(
        pending
          .filter((row) => row.eventId.startsWith('evt_during_'))
          .every((row) => row.status === 'pending'),
      ).toBe(true)

      redis = await startRedisServer(redis.port)
      await expect
        .poll(
          async () => {
            const rows = await database.db.select({ status: inboundEvents.status }).from(inboundEvents)
            return rows.length === 35 && rows.every((row) => row.status === 'done')
          },
          { timeout: 30_000, interval: 250 },
        )
        .toBe(true)
      const counts =
        await database.sql`select event_id, count(*)::int as n from handler_effects group by event_id`
      expect(counts).toHaveLength(35)
      expect(counts.every((row) => row.n === 1)).toBe(true)
    } finally {
      await running.close()
      await redis.stop()
    }
  }, 60_000)
})
