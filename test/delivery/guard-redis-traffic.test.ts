import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { routeForwardSchema } from '../../src/config/routes.js'
import { forwardDestination } from '../../src/delivery/forward.js'
import type { DeliveryVerdict, Destination, DestinationGuard } from '../../src/delivery/guard.js'
import { CLOSED_CIRCUIT_RECHECK_MS, createRedisGuard } from '../../src/delivery/redis-guard.js'
import { createLogger } from '../../src/logger.js'
import {
  GUARD_COMMAND_TIMEOUT_MS,
  guardConnection,
  type RedisConnection,
} from '../../src/queue/connections.js'
import { startRedisServer } from '../support/redis-server.js'

// What the destination guard costs Redis per delivery (README, "Protecting destinations" and "A closed
// circuit read once per 100 ms"): a closed circuit is read once per recheck period per process, a
// success whose count is already 0 writes nothing, its scripts go by SHA1, and the commands of
// deliveries admitted together share one pipeline. A redis-server of the test's own, so its command
// counts are the guard's alone.

let redis: Awaited<ReturnType<typeof startRedisServer>>
let admin: Redis
let connection: RedisConnection
let guard: DestinationGuard
/** The connection of a second guard on the same keys: another worker process. */
let otherConnection: RedisConnection
let otherGuard: DestinationGuard
const PREFIX = 'hl-guard-traffic'
let destinations = 0
/** A destination no delivery has used yet: this process has not read its circuit. */
function freshDestination() {
  destinations += 1
  return forwardDestination(
    `shop/forward-${destinations}`,
    routeForwardSchema.parse({
      url: 'http://127.0.0.1:9/',
      circuitBreaker: { failureThreshold: 3, coolDownMs: 60_000 },
    }),
  )
}

async function readyConnection(url: string): Promise<RedisConnection> {
  const ready = guardConnection(url)
  // The guard's connection queues nothing while it connects (it fails fast instead): wait for it.
  if (ready.status !== 'ready') await new Promise((resolve) => ready.once('ready', resolve))
  return ready
}

beforeAll(async () => {
  redis = await startRedisServer()
  admin = new Redis(redis.url)
  connection = await readyConnection(redis.url)
  otherConnection = await readyConnection(redis.url)
  guard = createRedisGuard(connection, PREFIX, createLogger('silent'))
  otherGuard = createRedisGuard(otherConnection, PREFIX, createLogger('silent'))
  // Loads the gate's and the verdict's scripts: a script's first use is an EVAL (after the
  // EVALSHA's NOSCRIPT), which would blur the counts below.
  await admitAndSettle(freshDestination(), 1, { kind: 'failure' })
})

afterAll(async () => {
  await guard?.close()
  await otherGuard?.close()
  admin?.disconnect()
  await redis?.stop()
})

/** Calls of each command since the last CONFIG RESETSTAT, from INFO commandstats. */
async function commandCalls(): Promise<Map<string, number>> {
  const info = await admin.info('commandstats')
  const calls = new Map<string, number>()
  for (const [, command, count] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    calls.set(command as string, Number(count))
  }
  return calls
}

async function evalshaCalls(): Promise<number> {
  return (await commandCalls()).get('evalsha') ?? 0
}

async function admitAndSettle(
  destination: Destination,
  deliveries: number,
  verdict: DeliveryVerdict = { kind: 'success' },
  using: DestinationGuard = guard,
): Promise<void> {
  const admissions = await Promise.all(Array.from({ length: deliveries }, () => using.admit(destination)))
  for (const admission of admissions) expect(admission.kind).toBe('admitted')
  await Promise.all(
    admissions.map((admission) => (admission.kind === 'admitted' ? admission.settle(verdict) : null)),
  )
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('the destination guard on Redis', () => {
  it('reads a closed circuit once per recheck period, and a success with no failures to reset writes nothing', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1) // reads the circuit
    await admin.config('RESETSTAT')
    await admitAndSettle(destination, 40)
    expect(await evalshaCalls()).toBe(0)
    await sleep(CLOSED_CIRCUIT_RECHECK_MS + 50)
    await admitAndSettle(destination, 40)
    // The first delivery of the new period read the circuit again; none wrote a verdict.
    expect(await evalshaCalls()).toBe(1)
    expect((await commandCalls()).get('eval') ?? 0).toBe(0)
  })

  it('writes a failure at once; the next delivery reads the circuit again, and its success resets the count', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1)
    await admin.config('RESETSTAT')
    await admitAndSettle(destination, 1, { kind: 'failure' })
    expect(await evalshaCalls()).toBe(1)
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'closed', failures: 1 })
    await admitAndSettle(destination, 1)
    // A gate (the failure dropped what this process knew) and the success's reset.
    expect(await evalshaCalls()).toBe(3)
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'closed', failures: 0 })
  })

  it('opens on consecutive failures in this process: the delivery after the one that opened it waits', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 3, { kind: 'failure' })
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'open', failures: 3 })
    expect(await guard.admit(destination)).toMatchObject({ kind: 'wait' })
  })

  it('a failure that opens the circuit while this process reads it again: the read is not kept, the next delivery waits', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 2, { kind: 'failure' })
    const admitted = await guard.admit(destination) // reads 2 failures, closed
    if (admitted.kind !== 'admitted') throw new Error('not admitted')
    await sleep(CLOSED_CIRCUIT_RECHECK_MS + 20)
    // In one turn, so in one pipeline: the read goes to Redis before the third failure's write.
    const reading = guard.admit(destination)
    const third = admitted.settle({ kind: 'failure' })
    await Promise.all([reading, third])
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'open', failures: 3 })
    expect(await guard.admit(destination)).toMatchObject({
      kind: 'wait',
      reason: `the circuit of ${destination.id} is open`,
    })
  })

  it('a success resets failures another process counted once this process reads them', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1) // this process reads 0 failures
    await admitAndSettle(destination, 2, { kind: 'failure' }, otherGuard)
    await sleep(CLOSED_CIRCUIT_RECHECK_MS + 50)
    await admitAndSettle(destination, 1)
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'closed', failures: 0 })
  })

  it('a circuit another process opened holds back this process within the recheck period', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1)
    await admitAndSettle(destination, 3, { kind: 'failure' }, otherGuard)
    expect(await otherGuard.admit(destination)).toMatchObject({ kind: 'wait' })
    await sleep(CLOSED_CIRCUIT_RECHECK_MS + 50)
    expect(await guard.admit(destination)).toMatchObject({
      kind: 'wait',
      reason: `the circuit of ${destination.id} is open`,
    })
  })

  it('a Retry-After this process got holds back its next delivery', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1)
    const admission = await guard.admit(destination)
    if (admission.kind !== 'admitted') throw new Error('not admitted')
    await admission.settle({ kind: 'failure' }, 30_000)
    expect(await guard.admit(destination)).toMatchObject({
      kind: 'wait',
      reason: `${destination.id} asked to wait (Retry-After)`,
    })
  })

  it('a Redis that stops answering: deliveries go on a closed circuit for one more period at most, then wait', async () => {
    const destination = freshDestination()
    await admitAndSettle(destination, 1)
    await sleep(CLOSED_CIRCUIT_RECHECK_MS + 20)
    redis.freeze()
    try {
      // This delivery reads the circuit again, and gets no answer.
      const rechecking = guard.admit(destination)
      expect(await guard.admit(destination)).toMatchObject({ kind: 'admitted' })
      await sleep(CLOSED_CIRCUIT_RECHECK_MS + 20)
      // Past that period a delivery asks Redis itself: unanswered, it waits once the command times out.
      const startedAt = Date.now()
      expect(await guard.admit(destination)).toMatchObject({
        kind: 'wait',
        reason: 'destination limits cannot be checked now',
      })
      expect(Date.now() - startedAt).toBeGreaterThanOrEqual(GUARD_COMMAND_TIMEOUT_MS - 50)
      expect(await rechecking).toMatchObject({ kind: 'wait' })
    } finally {
      redis.thaw()
    }
    await admitAndSettle(destination, 1)
  })

  it('pipelines the commands of deliveries admitted in the same turn', async () => {
    const destination = freshDestination()
    const admissions = Array.from({ length: 20 }, () => guard.admit(destination))
    // Still in the turn that asked: the gates wait in one pipeline, sent when the turn ends.
    expect(connection.autoPipelineQueueSize).toBe(20)
    for (const admission of await Promise.all(admissions)) {
      expect(admission.kind).toBe('admitted')
      if (admission.kind === 'admitted') await admission.settle({ kind: 'success' })
    }
  })

  it('loads its scripts again when Redis lost them', async () => {
    await admin.script('FLUSH')
    const destination = freshDestination()
    await admitAndSettle(destination, 2, { kind: 'failure' })
    await admitAndSettle(destination, 1)
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'closed', failures: 0 })
  })
})
