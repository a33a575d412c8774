import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLogger } from '../../src/logger.js'
import { claimQueuePrefix } from '../../src/queue/prefix-owner.js'
import { type Child, startChild } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import {
  busiestWindow,
  deliverSigned,
  eventStatuses,
  forwardsOf,
  metricLine,
  notDoneYet,
  statusCounts,
} from '../support/delivery.js'
import { type RedisCluster, startRedisCluster } from '../support/redis-cluster.js'
import { runCommand } from '../support/run-command.js'
import { FAULT_TOLERANT } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// The real service in child processes on a Redis Cluster of the test's own (three masters, each with
// a replica): BullMQ's scripts, the relay, the rate limiter and the circuit breaker all run there
// with every key of the deployment in the hash slot of its tagged prefix.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const STORM = 40
const RATE_EVENTS = 100
const LOST_EVENTS = 50
const CRASH_EVENTS = 30
const SENDERS = 4
const MOST_UNDER_LOAD = 1000
/** Each sender's pause between deliveries: the load lasts through the failover without a runaway count. */
const PACE_MS = 50

let cluster: RedisCluster
let database: TestDatabase
let forwards: Awaited<ReturnType<typeof startSink>>
let limited: Awaited<ReturnType<typeof startSink>>
let flaky: Awaited<ReturnType<typeof startSink>>
let flakyHealthy = false
const limitedArrivals: number[] = []
let directory: string
const children: Child[] = []

const verify = { scheme: 'standard-webhooks', secrets: [TEST_SECRET] }

beforeAll(async () => {
  cluster = await startRedisCluster({ replicas: true })
  database = await createTestDatabase()
  forwards = await startSink(() => ({ status: 200, body: 'ok' }))
  limited = await startSink(() => {
    limitedArrivals.push(Date.now())
    return { status: 200 }
  })
  flaky = await startSink(() => ({ status: flakyHealthy ? 200 : 503 }))
  directory = mkdtempSync(join(tmpdir(), 'hookledger-redis-cluster-'))
  writeFileSync(
    join(directory, 'config.json'),
    JSON.stringify({
      sources: [
        { id: 'acme', verify, handler: { type: 'forward', url: forwards.url, timeoutMs: 1000 } },
        {
          id: 'shop',
          verify,
          routes: [{ id: 'slow', forward: { url: limited.url, rateLimit: { perSecond: 20 } } }],
        },
        {
          id: 'cb',
          verify,
          routes: [
            {
              id: 'flaky',
              forward: { url: flaky.url, circuitBreaker: { failureThreshold: 3, coolDownMs: 1500 } },
            },
          ],
        },
      ],
      ...FAULT_TOLERANT,
      worker: { ...FAULT_TOLERANT.worker, concurrency: 8 },
    }),
  )
}, 90_000)

afterAll(async () => {
  for (const child of children) await child.kill()
  await cluster?.stop()
  await forwards?.close()
  await limited?.close()
  await flaky?.close()
  await database?.drop()
  if (directory) rmSync(directory, { recursive: true, force: true })
})

const sleep = (ms: number) => new Promise((wake) => setTimeout(wake, ms))
const prefix = () => `{hookledger-${database.deploymentId}}`

const deliver = (running: Child, source: string, eventId: string) =>
  deliverSigned(running.url, source, eventId)
const statusOf = (eventId: string) => eventStatuses(database.sql, eventId)

async function serve(role: 'all' | 'api' | 'worker', env: Record<string, string> = {}) {
  const child = await startChild(['bin/hookledger.js', 'serve', '--role', role], {
    DATABASE_URL: database.url,
    REDIS_URL: cluster.url,
    HOOKLEDGER_CONFIG: join(directory, 'config.json'),
    LOG_LEVEL: 'warn',
    ...env,
  })
  children.push(child)
  return child
}

/** The master that serves the hash slot of the deployment's prefix, where all its keys live. */
async function prefixMaster(): Promise<number> {
  const [port] = await cluster.masterPorts()
  if (port === undefined) throw new Error('no master')
  const slot = Number(await cluster.node(port).call('CLUSTER', 'KEYSLOT', prefix()))
  const ranges = (await cluster.node(port).call('CLUSTER', 'SLOTS')) as Array<
    [number, number, [string, number]]
  >
  const range = ranges.find(([from, to]) => from <= slot && slot <= to)
  if (range === undefined) throw new Error(`no master serves slot ${slot}`)
  return range[2][1]
}

describe('on a Redis Cluster (3 masters, 3 replicas)', () => {
  let running: Child

  it('serves: an event is accepted, DONE and forwarded once, every key in the slot of the tagged prefix', async () => {
    running = await serve('all')
    expect(await deliver(running, 'acme', 'evt_cluster_one')).toEqual({ status: 200, answer: 'accepted' })
    await expect.poll(() => statusOf('evt_cluster_one'), { timeout: 15_000 }).toEqual(['done'])
    expect(forwardsOf(forwards, 'evt_cluster_one')).toBe(1)
    expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
    const perNode = await Promise.all(
      cluster.nodes.map(async ({ port }) => {
        const clients = String(await cluster.node(port).call('CLIENT', 'LIST'))
          .trim()
          .split('\n')
        // Not this test's own connection, nor a replica's replication link.
        return clients.filter((line) => !/ flags=S /.test(line)).length - 1
      }),
    )
    console.info(`one --role all process: Redis connections per node ${JSON.stringify(perNode)}`)
    // The keys hookledger keeps are all on the master of the prefix's slot, each tagged by it.
    const owner = await prefixMaster()
    for (const port of await cluster.masterPorts()) {
      const keys = (await cluster.node(port).keys('*')) as string[]
      if (port === owner) {
        expect(keys.length).toBeGreaterThan(0)
        expect(keys.filter((key) => !key.startsWith(`${prefix()}:`))).toEqual([])
      } else {
        expect(keys).toEqual([])
      }
    }
  }, 60_000)

  it('a duplicate storm (one event delivered 40 times at once) leaves one row and one forward', async () => {
    const answers = await Promise.all(
      Array.from({ length: STORM }, () => deliver(running, 'acme', 'evt_cluster_storm')),
    )
    expect(
      answers.every((a) => a.status === 200),
      JSON.stringify(answers),
    ).toBe(true)
    expect(answers.filter((a) => a.answer === 'accepted')).toHaveLength(1)
    await expect.poll(() => statusOf('evt_cluster_storm'), { timeout: 15_000 }).toEqual(['done'])
    await sleep(1000) // a second forward would have had time to go out
    expect(forwardsOf(forwards, 'evt_cluster_storm')).toBe(1)
  }, 60_000)

  it('a route limited to 20/s across two worker processes: at most 20 per second, every event arrives once', async () => {
    children.push(await serve('worker'))
    for (let batch = 0; batch < RATE_EVENTS / 20; batch += 1) {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => deliver(running, 'shop', `evt_cluster_rate_${batch * 20 + i}`)),
      )
      expect(answers.every((a) => a.status === 200)).toBe(true)
    }
    await expect
      .poll(async () => (await statusCounts(database.sql, 'shop')).done, { timeout: 60_000, interval: 500 })
      .toBe(RATE_EVENTS)
    expect(limitedArrivals).toHaveLength(RATE_EVENTS)
    // Fixed one-second windows (as test/delivery/destination-limits.test.ts): a sliding second may
    // straddle two of them; 100 events need at least four full windows after the first.
    expect(busiestWindow(limitedArrivals, 1000)).toBeLessThanOrEqual(40)
    expect(Math.max(...limitedArrivals) - Math.min(...limitedArrivals)).toBeGreaterThanOrEqual(3500)
  }, 90_000)

  it('the circuit breaker opens after consecutive failures, holds events back, and closes on recovery', async () => {
    const open = 'hookledger_destination_circuit_open{destination="cb/flaky"}'
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => deliver(running, 'cb', `evt_cluster_cb_${i}`)),
    )
    expect(answers.every((a) => a.status === 200)).toBe(true)
    await expect.poll(() => metricLine(running.url, open), { timeout: 15_000 }).toBe(`${open} 1`)
    const atOpen = flaky.received.length
    // Both worker processes read the one circuit: while it is open only a half-open probe per
    // cool-down reaches the destination, where each of ten events would spend attempts every second.
    await sleep(4000)
    expect(flaky.received.length - atOpen).toBeLessThanOrEqual(4)
    expect((await statusCounts(database.sql, 'cb')).failed).toBeUndefined()
    flakyHealthy = true
    await expect.poll(() => statusCounts(database.sql, 'cb'), { timeout: 30_000 }).toEqual({ done: 10 })
    expect(await metricLine(running.url, open)).toBe(`${open} 0`)
  }, 60_000)

  it('one master of three evicting: /readyz says degraded and `hookledger doctor` names that master', async () => {
    const owner = await prefixMaster()
    const other = (await cluster.masterPorts()).find((port) => port !== owner)
    if (other === undefined) throw new Error('one master only')
    // Not the master of the queue's slot: only a check of every master sees it.
    await cluster.node(other).config('SET', 'maxmemory-policy', 'allkeys-lru')
    try {
      const readiness = async () => (await fetch(`${running.url}/readyz`)).json()
      expect(await readiness()).toMatchObject({
        status: 'degraded',
        checks: { redis: 'evicting: maxmemory-policy is allkeys-lru, must be noeviction' },
      })
      const doctor = await runCommand(process.execPath, ['bin/hookledger.js', 'doctor'], {
        cwd: ROOT,
        env: {
          DATABASE_URL: database.url,
          REDIS_URL: cluster.url,
          HOOKLEDGER_CONFIG: join(directory, 'config.json'),
        },
        timeoutMs: 30_000,
      })
      const lines = doctor.stdout.split('\n')
      expect(lines.find((line) => line.startsWith('error redis.eviction:'))).toContain(
        `1 of 3 Redis Cluster masters run maxmemory-policy allkeys-lru`,
      )
      expect(doctor.stdout).toContain(`127.0.0.1:${other} allkeys-lru`)
      expect(doctor.stdout).not.toContain('redis.unreachable')
      expect(doctor.stdout).not.toContain('doctor.check_failed')
    } finally {
      await cluster.node(other).config('SET', 'maxmemory-policy', 'noeviction')
    }
    expect(await (await fetch(`${running.url}/readyz`)).json()).toMatchObject({ status: 'ready' })
  }, 60_000)

  it('a fixed queue.prefix belongs to the first deployment that claims it, on the cluster too', async () => {
    const logger = createLogger('silent')
    const claim = (deploymentId: string) =>
      claimQueuePrefix({ redisUrl: cluster.url, prefix: '{hookledger-owned}', deploymentId, logger })
    await claim('deployment-a')
    await claim('deployment-a')
    await expect(claim('deployment-b')).rejects.toThrow('belongs to deployment deployment-a')
  })

  it('jobs lost from every master (FLUSHALL): the relay re-adds them and every accepted event is DONE, forwarded once', async () => {
    for (const child of children.splice(0)) await child.kill('SIGTERM')
    const api = await serve('api')
    const ids = Array.from({ length: LOST_EVENTS }, (_, i) => `evt_cluster_lost_${i}`)
    for (const eventId of ids) expect(await deliver(api, 'acme', eventId)).toMatchObject({ status: 200 })
    // Every row reached its job in Redis: only the flush can leave one without.
    await expect
      .poll(
        async () =>
          (
            await database.sql<Array<{ n: number }>>`
              select count(*)::int as n from inbound_events where enqueued_at is null`
          )[0]?.n,
        { timeout: 20_000 },
      )
      .toBe(0)
    for (const port of await cluster.masterPorts()) expect(await cluster.node(port).flushall()).toBe('OK')
    for (const port of await cluster.masterPorts()) expect(await cluster.node(port).dbsize()).toBe(0)
    running = await serve('worker')
    await expect
      .poll(async () => Promise.all(ids.map(statusOf)), { timeout: 45_000, interval: 500 })
      .toEqual(ids.map(() => ['done']))
    await sleep(1000)
    expect(ids.filter((eventId) => forwardsOf(forwards, eventId) !== 1)).toEqual([])
    await api.kill('SIGTERM')
  }, 90_000)

  it('a worker killed mid-batch (SIGKILL as a DONE commits): a new worker finishes every event, none DONE sent again', async () => {
    for (const child of children.splice(0)) await child.kill('SIGTERM')
    const crashing = await serve('worker', { HOOKLEDGER_FAILPOINT: 'worker.after_done' })
    const api = await serve('api')
    const ids = Array.from({ length: CRASH_EVENTS }, (_, i) => `evt_cluster_crash_${i}`)
    for (const outcome of await Promise.all(ids.map((eventId) => deliver(api, 'acme', eventId))))
      expect(outcome.status).toBe(200)
    expect(await crashing.exited).toBe('SIGKILL')
    const completed = await database.sql<Array<{ event_id: string }>>`
      select event_id from inbound_events where event_id like 'evt_cluster_crash_%' and status = 'done'`
    expect(completed.length).toBeGreaterThan(0)
    const [inFlight] = await database.sql<Array<{ n: number }>>`
      select count(*)::int as n from inbound_events
      where event_id like 'evt_cluster_crash_%' and status = 'processing'`
    running = await serve('worker')
    await expect
      .poll(async () => Promise.all(ids.map(statusOf)), { timeout: 60_000, interval: 500 })
      .toEqual(ids.map(() => ['done']))
    await sleep(1000)
    expect(ids.filter((eventId) => forwardsOf(forwards, eventId) === 0)).toEqual([])
    for (const { event_id } of completed) expect(forwardsOf(forwards, event_id)).toBe(1)
    // A repeat is only a forward under way at the kill, sent at most once more under the same key.
    const sent = ids.reduce((sum, eventId) => sum + forwardsOf(forwards, eventId), 0)
    expect(sent - ids.length).toBeLessThanOrEqual(inFlight?.n ?? 0)
    await api.kill('SIGTERM')
  }, 120_000)

  /**
   * Four senders deliver through a failover of the master of the prefix's slot, brought about by
   * `fault`: the replica must take over, every accepted event end DONE and forwarded once, and only
   * 200 and 503 be answered. Returns the master's port.
   */
  async function failoverUnderLoad(fault: (master: number) => Promise<void> | void, label: string) {
    for (const child of children.splice(0)) await child.kill('SIGTERM')
    running = await serve('all')
    const accepted: string[] = []
    const answers = new Map<number | string, number>()
    let sent = 0
    let stopped = false
    const sender = async () => {
      while (!stopped && sent < MOST_UNDER_LOAD) {
        const eventId = `evt_cluster_${label}_${sent}`
        sent += 1
        const outcome = await deliver(running, 'acme', eventId).catch(() => ({
          status: 'no answer',
          answer: undefined,
        }))
        if (outcome.status === 200 && outcome.answer === 'accepted') accepted.push(eventId)
        answers.set(outcome.status, (answers.get(outcome.status) ?? 0) + 1)
        await sleep(PACE_MS)
      }
    }
    const senders = Array.from({ length: SENDERS }, sender)
    const progress = (since: number, count: number) =>
      expect.poll(() => accepted.length - since, { timeout: 30_000 }).toBeGreaterThanOrEqual(count)
    let killed: number
    let killedAt = 0
    let healthyAfterMs = 0
    let acceptedDuring = 0
    try {
      await progress(0, 40)
      killed = await prefixMaster()
      await fault(killed)
      killedAt = Date.now()
      const acceptedBefore = accepted.length
      await cluster.waitHealthy(30_000)
      healthyAfterMs = Date.now() - killedAt
      acceptedDuring = accepted.length - acceptedBefore
      await progress(accepted.length, 40)
    } finally {
      stopped = true
      await Promise.all(senders)
    }
    expect(await prefixMaster()).not.toBe(killed)
    expect(running.process.exitCode, running.output()).toBeNull()
    expect(
      [...answers.keys()].filter((status) => status !== 200 && status !== 503),
      `${JSON.stringify([...answers])}\n${running.output().slice(-3000)}`,
    ).toEqual([])
    try {
      await expect
        .poll(() => notDoneYet(database.sql, accepted), { timeout: 60_000, interval: 500 })
        .toEqual([])
    } catch (error) {
      // Where the rows stopped, and what the process said (warn and above) while they did.
      const stuck = await database.sql`
        select status::text, attempts, enqueued_at is not null as enqueued, job_id,
               lease_until > now() as lease_live, left(last_error, 200) as last_error, count(*)::int as rows
        from inbound_events where event_id = any(${accepted}) and status <> 'done'
        group by 1, 2, 3, 4, 5, 6 order by rows desc limit 20`
      throw new Error(
        `${(error as Error).message}\nrows not DONE: ${JSON.stringify(stuck)}\n${running.output().slice(-6000)}`,
      )
    }
    await sleep(1000)
    const notOnce = accepted.filter((eventId) => forwardsOf(forwards, eventId) !== 1)
    if (notOnce.length > 0) {
      // What each attempt at those events recorded, beside how often the destination saw them.
      const attempts = await database.sql`
        select e.event_id, a.attempt, a.outcome, a.response_status, left(a.error, 300) as error,
               a.started_at, a.finished_at
        from inbound_events e join event_attempts a on a.event_row_id = e.id
        where e.event_id = any(${notOnce}) order by e.event_id, a.id`
      expect(
        notOnce,
        `forwards: ${JSON.stringify(notOnce.map((eventId) => [eventId, forwardsOf(forwards, eventId)]))}\n` +
          `attempts: ${JSON.stringify(attempts)}\n${running.output().slice(-6000)}`,
      ).toEqual([])
    }
    console.info(
      `failover (${label}): replica promoted ${healthyAfterMs} ms after the fault, every accepted event DONE ` +
        `${Date.now() - killedAt} ms after it; ${accepted.length} accepted (${acceptedDuring} while the slot had no master), answers ` +
        `${JSON.stringify([...answers])}, ${running.output().split('\n').filter(Boolean).length} log lines (warn and above)`,
    )
    await expect
      .poll(
        async () => ((await (await fetch(`${running.url}/readyz`)).json()) as { status: string }).status,
        {
          timeout: 15_000,
        },
      )
      .toBe('ready')
    return killed
  }

  // A machine gone silent, as a vanished host or a partition is: no reset, no error, every socket
  // open. What the clients sent to it waits for an answer that never comes; only the connections'
  // silence limit (src/queue/connections.ts) moves them to the promoted replica.
  it('the master of the queue goes silent under load (SIGSTOP): its replica takes over, every accepted event is DONE and forwarded once, only 503 refused', async () => {
    const silent = await failoverUnderLoad((master) => cluster.freeze(master), 'silent')
    // Back as a replica of the node that took its slots, for the case below.
    await cluster.thaw(silent)
  }, 150_000)

  it('the master of the queue is killed under load: its replica takes over, every accepted event is DONE and forwarded once, only 503 refused', async () => {
    await failoverUnderLoad((master) => cluster.kill(master), 'killed')
  }, 150_000)
})
