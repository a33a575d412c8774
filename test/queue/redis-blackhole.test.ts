import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { deliverSigned, forwardsOf, metricLine, notDoneYet } from '../support/delivery.js'
import { startRedisServer } from '../support/redis-server.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

// A network path to Redis that drops its flows without a reset (a NAT or firewall that lost its
// state, a failover behind a proxy): every open socket stays open and nothing comes back on it, while
// new connections get through. Redis itself never went down, so no connection hears of an error: the
// api's enqueues, the relay's, the worker's fetches and the destination guard's commands all wait on
// dead sockets. The api and the worker run as separate services here, so every event crosses Redis.

let database: TestDatabase
let redis: Awaited<ReturnType<typeof startRedisServer>>
let proxy: TcpProxy
let sink: Awaited<ReturnType<typeof startSink>>
const services: TestService[] = []

beforeAll(async () => {
  database = await createTestDatabase()
  redis = await startRedisServer()
  proxy = await startTcpProxy({ host: '127.0.0.1', port: redis.port })
  sink = await startSink(() => ({ status: 200 }))
  const config = buildConfig(
    {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          routes: [{ id: 'sink', forward: { url: sink.url } }],
        },
      ],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
    },
    () => undefined,
  )
  const redisUrl = proxy.urlFor(redis.url)
  services.push(await startTestService({ role: 'api', config, database, redisUrl }))
  services.push(await startTestService({ role: 'worker', config, database, redisUrl }))
}, 60_000)

afterAll(async () => {
  for (const service of services) await service.close()
  await proxy?.close()
  await redis?.stop()
  await sink?.close()
  await database?.drop()
})

describe('a Redis whose network path drops every open connection without a word', () => {
  it('answers deliveries at once, then forwards every event once, over connections made again', async () => {
    const [api] = services
    const url = api?.url ?? ''
    const before = Array.from({ length: 5 }, (_, i) => `evt_before_${i}`)
    for (const eventId of before) expect((await deliverSigned(url, 'acme', eventId)).status).toBe(200)
    await expect.poll(() => notDoneYet(database.sql, before), { timeout: 15_000 }).toEqual([])

    expect(proxy.blackhole()).toBeGreaterThan(0)
    const during = Array.from({ length: 10 }, (_, i) => `evt_during_${i}`)
    const answers = await Promise.all(
      during.map(async (eventId) => {
        const started = Date.now()
        const { status } = await deliverSigned(url, 'acme', eventId)
        return { status, ms: Date.now() - started }
      }),
    )
    for (const answer of answers) expect(answer.status).toBe(200)
    // A hang check, not a benchmark: the answer follows the ledger's commit, never a Redis reply.
    expect(Math.max(...answers.map((answer) => answer.ms))).toBeLessThan(2000)

    // New connections get through again; the flows that were open stay dead for good.
    proxy.forward()
    await expect.poll(() => notDoneYet(database.sql, during), { timeout: 40_000, interval: 500 }).toEqual([])
    for (const eventId of [...before, ...during]) expect(forwardsOf(sink, eventId)).toBe(1)

    // Each connection made again is counted, so an operator sees a path that drops flows.
    const reconnects = async (service: TestService | undefined, connection: string) =>
      Number(
        (
          await metricLine(
            service?.url ?? '',
            `hookledger_redis_reconnects_total{connection="${connection}"}`,
          )
        )
          ?.split(' ')
          .at(-1) ?? 0,
      )
    expect(await reconnects(api, 'producer')).toBeGreaterThanOrEqual(1)
    expect(await reconnects(services[1], 'worker')).toBeGreaterThanOrEqual(1)
  }, 90_000)

  it('a shutdown ends within its deadlines, not after each of them in turn', async () => {
    // A deployment of its own (another database, so another queue prefix: the services above would
    // take its jobs), whose destination refuses every connection: its event waits for a retry.
    const ownDatabase = await createTestDatabase()
    const ownProxy = await startTcpProxy({ host: '127.0.0.1', port: redis.port })
    const running = await startTestService({ database: ownDatabase, redisUrl: ownProxy.urlFor(redis.url) })
    try {
      expect((await deliverSigned(running.url, 'acme', 'evt_before_shutdown')).status).toBe(200)
      await expect
        .poll(async () => (await ownDatabase.sql`select attempts from inbound_events`)[0]?.attempts, {
          timeout: 15_000,
        })
        .toBeGreaterThan(0)
      expect(ownProxy.blackhole()).toBeGreaterThan(0)
      // Long enough for the worker's next command to be swallowed.
      await new Promise((resolve) => setTimeout(resolve, 1000))
      const started = Date.now()
      await running.close()
      // A hang check: the relay's 3 s, then the worker's 10 s (and 1 s forced) beside the
      // reconciler's 10 s. One after the other, the two took 24 s in all.
      expect(Date.now() - started).toBeLessThan(18_000)
    } finally {
      await running.close()
      await ownProxy.close()
      await ownDatabase.drop()
    }
  }, 60_000)

  it('a process with a fixed queue.prefix starts while the path is silent, its ownership check given up', async () => {
    const ownDatabase = await createTestDatabase()
    const ownProxy = await startTcpProxy({ host: '127.0.0.1', port: redis.port })
    ownProxy.blackhole()
    let running: TestService | undefined
    try {
      const started = Date.now()
      running = await startTestService({
        database: ownDatabase,
        redisUrl: ownProxy.urlFor(redis.url),
        config: testConfig({ queue: { prefix: `hookledger-silent-${ownDatabase.deploymentId}` } }),
      })
      // A hang check: the check's command tried on two connections, each given up after 5 s of
      // silence; before that limit the start waited for ever.
      expect(Date.now() - started).toBeLessThan(30_000)
      expect(running.logged()).toContain('could not check which deployment owns queue.prefix')
      // The ledger answers meanwhile.
      expect((await deliverSigned(running.url, 'acme', 'evt_while_silent')).status).toBe(200)
    } finally {
      await running?.close()
      await ownProxy.close()
      await ownDatabase.drop()
    }
  }, 60_000)
})
