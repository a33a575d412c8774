import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { deliverEvent, statusCounts } from '../support/delivery.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { runCli } from './seed.js'

// One FAILED event replayed from a terminal, with the api and the worker in processes of their own:
// the api gave the row a job of its own id, which BullMQ keeps, completed, for a day. The CLI only
// clears the row's job mark; the relay's next pass must run the row now, not leave it to the orphan
// pass (a minute away here), as an add under the kept id would, which BullMQ ignores.

let database: TestDatabase
let healthy = false
let sink: Awaited<ReturnType<typeof startSink>>
const services: TestService[] = []

beforeAll(async () => {
  database = await createTestDatabase()
  sink = await startSink(() => ({ status: healthy ? 200 : 503 }))
  const config = buildConfig(
    {
      sources: [
        {
          id: 'one',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          routes: [{ id: 'sink', forward: { url: sink.url } }],
        },
      ],
      worker: { ...FAST_WORKER, maxAttempts: 2 },
      relay: { ...FAST_RELAY, orphanAfterMs: 60_000 },
    },
    () => undefined,
  )
  services.push(await startTestService({ role: 'api', config, database }))
  services.push(await startTestService({ role: 'worker', config, database }))
}, 60_000)

afterAll(async () => {
  for (const service of services) await service.close()
  await sink?.close()
  await database?.drop()
})

describe('hookledger events replay of one event', () => {
  it('goes out at the relay’s next pass, though BullMQ keeps its finished job under the row’s id', async () => {
    const [api] = services
    await deliverEvent(api?.url ?? '', 'one', 'evt_replayed_once')
    await expect.poll(() => statusCounts(database.sql, 'one'), { timeout: 15_000 }).toEqual({ failed: 1 })
    expect(sink.received).toHaveLength(2)

    healthy = true
    const replay = await runCli(['events', 'replay', '--source', 'one'], database.url)
    expect(replay.stdout).toMatch(/^replayed 1 FAILED event/)
    await expect.poll(() => statusCounts(database.sql, 'one'), { timeout: 15_000 }).toEqual({ done: 1 })
    expect(sink.received).toHaveLength(3)
  }, 60_000)
})
