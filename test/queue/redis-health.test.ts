import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inspectRedis, watchRedis } from '../../src/queue/redis-health.js'
import { type Child, startChild } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { deliverEvent, deliverSigned, forwardsOf, metricLine, notDoneYet } from '../support/delivery.js'
import { captureLogs } from '../support/log-capture.js'
import { startRedisServer } from '../support/redis-server.js'
import { FAST_RELAY, FAST_WORKER, startTestService } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { testConfig } from '../support/stack.js'

// A Redis that cannot keep jobs: one that evicts them when its memory fills, one that refuses every
// write because it is full. hookledger says so in its own log and on /readyz, and the events the
// full one could not take show on /metrics and raise an alert.

let database: TestDatabase
let directory: string

beforeAll(async () => {
  database = await createTestDatabase()
  directory = mkdtempSync(join(tmpdir(), 'hookledger-redis-health-'))
})
afterAll(async () => {
  await database.drop()
  rmSync(directory, { recursive: true, force: true })
})

interface Readiness {
  status: string
  checks: Record<string, string>
}

async function readiness(url: string): Promise<{ code: number; body: Readiness }> {
  const answer = await fetch(`${url}/readyz`)
  return { code: answer.status, body: (await answer.json()) as Readiness }
}

/** The process's output as JSON log entries; a line that is not JSON fails the test. */
function logEntries(output: string): Array<Record<string, unknown>> {
  return output
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>
      } catch {
        throw new Error(`a line outside the JSON log: ${line}`)
      }
    })
}

describe('an evicting Redis', () => {
  it('is an error with the fix in hookledger’s own log at start, and a degraded (still ready) /readyz', async () => {
    const redis = await startRedisServer(undefined, ['--maxmemory-policy', 'allkeys-lru'])
    const configPath = join(directory, 'evicting.json')
    writeFileSync(
      configPath,
      JSON.stringify({
        sources: [
          {
            id: 'acme',
            verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
            handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
          },
        ],
      }),
    )
    let child: Child | undefined
    try {
      child = await startChild(['bin/hookledger.js', 'serve', '--config', configPath], {
        DATABASE_URL: database.url,
        REDIS_URL: redis.url,
      })
      const ready = await readiness(child.url)
      expect(ready).toEqual({
        code: 200,
        body: {
          status: 'degraded',
          checks: { postgres: 'ok', redis: 'evicting: maxmemory-policy is allkeys-lru, must be noeviction' },
        },
      })
      const running = child
      await expect.poll(() => running.output(), { timeout: 10_000 }).toContain('hookledger worker started')
      const entries = logEntries(child.output())
      const errors = entries.filter((entry) => entry.level === 50)
      expect(errors).toHaveLength(1)
      expect(errors[0]).toMatchObject({ policy: 'allkeys-lru', readFrom: 'config' })
      expect(String(errors[0]?.msg)).toContain('CONFIG SET maxmemory-policy noeviction')
      expect(String(errors[0]?.fix)).toContain('parameter group')
      // Said before the process listens, not only when someone asks /readyz.
      const listening = entries.findIndex((entry) => entry.msg === 'hookledger listening')
      expect(entries.indexOf(errors[0] ?? {})).toBeLessThan(listening)
      // BullMQ's own plain-text warning (one per connection) is not printed beside the JSON log.
      expect(child.output()).not.toContain('IMPORTANT!')
    } finally {
      await child?.kill()
      await redis.stop()
    }
  }, 60_000)

  it('is read from INFO when CONFIG is disabled, and is a warning, not a failure, when both are', async () => {
    // Renamed to nothing: disabled, as managed Redis services do with CONFIG.
    const renamed = await startRedisServer(undefined, [
      '--maxmemory-policy',
      'volatile-lru',
      '--rename-command',
      'CONFIG',
      '',
    ])
    const silent = await startRedisServer(undefined, [
      '--rename-command',
      'CONFIG',
      '',
      '--rename-command',
      'INFO',
      '',
    ])
    // ioredis's ready check is an INFO too.
    const clients = [renamed, silent].map((server) => new Redis(server.url, { enableReadyCheck: false }))
    try {
      const [viaInfo, refused] = clients
      if (viaInfo === undefined || refused === undefined) throw new Error('two clients expected')
      expect(await inspectRedis(viaInfo, 'hl-test:probe')).toEqual({
        policy: 'volatile-lru',
        policyFrom: 'info',
        refusingWrites: false,
      })
      const { logger, entries } = captureLogs('info')
      const watch = watchRedis({
        inspect: () => inspectRedis(refused, 'hl-test:probe'),
        logger,
        intervalMs: 60_000,
      })
      expect(await watch.check()).toEqual({ policy: undefined, policyFrom: 'refused', refusingWrites: false })
      await watch.check()
      watch.stop()
      expect(entries().map((entry) => [entry.level, entry.msg])).toEqual([
        [
          40,
          'Redis refused CONFIG GET and INFO: its maxmemory-policy is unknown. Make sure it is noeviction',
        ],
      ])
    } finally {
      for (const client of clients) client.disconnect()
      await renamed.stop()
      await silent.stop()
    }
  })
})

describe('a Redis that refuses writes (noeviction, memory full)', () => {
  it('shows on /readyz and in the log, its unqueued events on /metrics and in an alert, and recovers', async () => {
    const redis = await startRedisServer(undefined, [
      '--maxmemory',
      '4mb',
      '--maxmemory-policy',
      'noeviction',
    ])
    const sink = await startSink(() => ({ status: 200 }))
    const alerts = await startSink(() => ({ status: 200 }))
    const { logger, entries } = captureLogs('info')
    const filler = new Redis(redis.url, { maxRetriesPerRequest: 1 })
    const running = await startTestService({
      database,
      redisUrl: redis.url,
      logger,
      config: testConfig(
        {
          worker: FAST_WORKER,
          relay: FAST_RELAY,
          alerts: {
            checkIntervalMs: 200,
            channels: [{ type: 'webhook', id: 'ops', url: alerts.url, secret: TEST_SECRET }],
            conditions: { unqueuedEvents: 2 },
          },
        },
        { handler: { type: 'forward', url: sink.url } },
      ),
    })
    try {
      expect(await readiness(running.url)).toEqual({
        code: 200,
        body: { status: 'ready', checks: { postgres: 'ok', redis: 'ok' } },
      })
      // Some data, then a maxmemory below it: with noeviction Redis refuses every write from now on.
      for (let i = 0; i < 4; i += 1) await filler.set(`filler:${i}`, 'x'.repeat(256 * 1024))
      await filler.config('SET', 'maxmemory', '1mb')
      await expect(filler.set('one-more', 'x')).rejects.toThrow(/OOM command not allowed/)

      expect(await readiness(running.url)).toEqual({
        code: 200,
        body: {
          status: 'degraded',
          checks: { postgres: 'ok', redis: 'refusing writes: out of memory (OOM)' },
        },
      })
      expect(entries()).toContainEqual(
        expect.objectContaining({ level: 50, msg: expect.stringMatching(/^Redis refuses writes \(OOM/) }),
      )

      // Accepted into the ledger all the same; Redis takes none of their jobs.
      for (let i = 0; i < 5; i += 1) await deliverEvent(running.url, 'acme', `evt_oom_${i}`)
      await expect
        .poll(
          async () =>
            (await (await fetch(`${running.url}/metrics`)).text()).match(
              /^hookledger_events_unqueued (\d+)/m,
            )?.[1],
          {
            timeout: 10_000,
          },
        )
        .toBe('5')
      await expect
        .poll(() => alerts.received.map((alert) => JSON.parse(alert.body).type), { timeout: 10_000 })
        .toContain('hookledger.alert.events_unqueued')
      const alert = alerts.received.find((received) => received.body.includes('events_unqueued'))
      // Sent once per window, with the count the check saw first (over the threshold of 2).
      expect(JSON.parse(alert?.body ?? '{}').data.details.unqueued).toBeGreaterThan(2)

      // Room again: ready, and the relay hands the five to the queue.
      await filler.config('SET', 'maxmemory', '0')
      await expect
        .poll(async () => (await readiness(running.url)).body.status, { timeout: 10_000 })
        .toBe('ready')
      await expect
        .poll(
          async () =>
            (await database.sql`select count(*)::int as n from inbound_events where status = 'done'`)[0]?.n,
          {
            timeout: 20_000,
          },
        )
        .toBe(5)
      expect(entries()).toContainEqual(
        expect.objectContaining({ level: 30, msg: 'Redis accepts writes again' }),
      )
    } finally {
      filler.disconnect()
      await running.close()
      await sink.close()
      await alerts.close()
      await redis.stop()
    }
  }, 90_000)
})

// Every replica of the api shares one Redis: a 503 from each when it stops answering would take them
// all out of their load balancer at once, and the providers' deliveries would be refused instead of
// committed and forwarded late. A worker-only process, and a process that never reached Redis (a new
// replica with a wrong REDIS_URL holds back its rollout), are not ready.
describe('a Redis that stops answering', () => {
  it('keeps the api ready (degraded) and committing, the worker and a new process not ready; all forwarded once it is back', async () => {
    // A database of its own: its deployment's queue prefix is its own too.
    const ownDatabase = await createTestDatabase()
    const redis = await startRedisServer()
    const sink = await startSink(() => ({ status: 200 }))
    const config = testConfig(
      { worker: FAST_WORKER, relay: FAST_RELAY },
      { handler: { type: 'forward', url: sink.url } },
    )
    const start = (role: 'api' | 'worker') =>
      startTestService({ role, config, database: ownDatabase, redisUrl: redis.url })
    const services = [await start('api'), await start('worker')]
    let running: typeof redis | undefined = redis
    const [api, worker] = services
    if (api === undefined || worker === undefined) throw new Error('two services expected')
    try {
      expect(await readiness(api.url)).toEqual({
        code: 200,
        body: { status: 'ready', checks: { postgres: 'ok', redis: 'ok' } },
      })
      expect((await deliverSigned(api.url, 'acme', 'evt_before_outage')).status).toBe(200)
      await expect
        .poll(() => notDoneYet(ownDatabase.sql, ['evt_before_outage']), { timeout: 15_000 })
        .toEqual([])

      await redis.stop()
      running = undefined
      expect(await readiness(api.url)).toEqual({
        code: 200,
        body: {
          status: 'degraded',
          checks: { postgres: 'ok', redis: 'unreachable: deliveries are committed and wait for the relay' },
        },
      })
      expect(await readiness(worker.url)).toEqual({
        code: 503,
        body: { status: 'unavailable', checks: { postgres: 'ok', redis: 'unavailable' } },
      })
      const during = ['evt_outage_1', 'evt_outage_2', 'evt_outage_3']
      for (const eventId of during) expect((await deliverSigned(api.url, 'acme', eventId)).status).toBe(200)
      expect(await notDoneYet(ownDatabase.sql, during)).toEqual(during)

      // /metrics still answers with what its stores can say: the queue's jobs are left out and the
      // failed read counted; the ledger's gauges (the gap the relay will close among them) are there.
      const scrape = await fetch(`${api.url}/metrics`)
      expect(scrape.status).toBe(200)
      const text = await scrape.text()
      expect(text).toMatch(/^hookledger_events_unqueued \d+$/m)
      expect(text).toMatch(/^hookledger_events\{source="acme",status="pending"\} 3$/m)
      expect(text).not.toMatch(/^hookledger_queue_jobs\{/m)
      await expect
        .poll(() =>
          metricLine(api.url, 'hookledger_gauge_read_failures_total{gauge="hookledger_queue_jobs"}'),
        )
        .toMatch(/ [1-9]\d*$/)

      // Started during the outage, it never reached Redis: not ready, so a rollout waits for it.
      const newcomer = await start('api')
      services.push(newcomer)
      expect((await readiness(newcomer.url)).code).toBe(503)

      running = await startRedisServer(redis.port)
      for (const service of services) {
        await expect
          .poll(async () => (await readiness(service.url)).body.status, { timeout: 10_000 })
          .toBe('ready')
      }
      await expect.poll(() => notDoneYet(ownDatabase.sql, during), { timeout: 30_000 }).toEqual([])
      for (const eventId of ['evt_before_outage', ...during]) expect(forwardsOf(sink, eventId)).toBe(1)
    } finally {
      for (const service of services) await service.close()
      await running?.stop()
      await sink.close()
      await ownDatabase.drop()
    }
  }, 90_000)

  it('as a forward is answered: the event is DONE and sent once, the guard’s bookkeeping left to finish after it', async () => {
    const ownDatabase = await createTestDatabase()
    const redis = await startRedisServer()
    let frozen = false
    // The destination takes the forward and answers 200 as Redis stops answering. With a concurrency
    // cap the guard gives the send's slot back after it, a command that now waits for its timeout
    // (a second): longer than the handler's deadline here, as a failover can take longer than any.
    // Awaited, it held the handler past its deadline: "did not finish within 500 ms", and a retry
    // sent the forward the destination had taken a second time.
    const sink = await startSink(() => {
      redis.freeze()
      frozen = true
      return { status: 200 }
    })
    const config = testConfig(
      { worker: { ...FAST_WORKER, handlerTimeoutMs: 500 }, relay: FAST_RELAY },
      { handler: { type: 'forward', url: sink.url, concurrency: 1 } },
    )
    const service = await startTestService({ config, database: ownDatabase, redisUrl: redis.url })
    try {
      expect((await deliverSigned(service.url, 'acme', 'evt_answered')).status).toBe(200)
      // DONE is the ledger's (PostgreSQL's) alone: it needs no answer from the frozen Redis.
      await expect.poll(() => notDoneYet(ownDatabase.sql, ['evt_answered']), { timeout: 5000 }).toEqual([])
      expect(frozen).toBe(true)
      redis.thaw()
      frozen = false
      // Long enough for a retry of a send taken for failed (backoff 50–200 ms, then the job).
      await new Promise((wake) => setTimeout(wake, 2000))
      expect(forwardsOf(sink, 'evt_answered')).toBe(1)
      const attempts = await ownDatabase.sql<Array<{ outcome: string; response_status: number | null }>>`
        select a.outcome, a.response_status from event_attempts a
        join inbound_events e on e.id = a.event_row_id where e.event_id = 'evt_answered' order by a.id`
      expect(attempts).toEqual([{ outcome: 'done', response_status: 200 }])
    } finally {
      if (frozen) redis.thaw()
      await service.close()
      await redis.stop()
      await sink.close()
      await ownDatabase.drop()
    }
  }, 60_000)
})
