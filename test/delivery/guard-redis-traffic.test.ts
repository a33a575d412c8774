import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { routeForwardSchema } from '../../src/config/routes.js'
import { forwardDestination } from '../../src/delivery/forward.js'
import type { DestinationGuard } from '../../src/delivery/guard.js'
import { createRedisGuard } from '../../src/delivery/redis-guard.js'
import { createLogger } from '../../src/logger.js'
import { guardConnection, type RedisConnection } from '../../src/queue/connections.js'
import { startRedisServer } from '../support/redis-server.js'

// What the destination guard costs Redis per delivery (README, "The guard's Redis commands
// pipelined"): its scripts go by SHA1, not with their text, and the commands of deliveries admitted
// together share one pipeline. A redis-server of the test's own, so its command counts are the
// guard's alone.

let redis: Awaited<ReturnType<typeof startRedisServer>>
let admin: Redis
let connection: RedisConnection
let guard: DestinationGuard
const destination = forwardDestination(
  'shop/forward',
  routeForwardSchema.parse({ url: 'http://127.0.0.1:9/' }),
)

beforeAll(async () => {
  redis = await startRedisServer()
  admin = new Redis(redis.url)
  connection = guardConnection(redis.url)
  // The guard's connection queues nothing while it connects (it fails fast instead): wait for it.
  if (connection.status !== 'ready') await new Promise((resolve) => connection.once('ready', resolve))
  guard = createRedisGuard(connection, 'hl-guard-traffic', createLogger('silent'))
})

afterAll(async () => {
  await guard?.close()
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

async function admitAndSettle(deliveries: number): Promise<void> {
  const admissions = await Promise.all(Array.from({ length: deliveries }, () => guard.admit(destination)))
  for (const admission of admissions) expect(admission.kind).toBe('admitted')
  await Promise.all(
    admissions.map((admission) =>
      admission.kind === 'admitted' ? admission.settle({ kind: 'success' }) : null,
    ),
  )
}

describe('the destination guard on Redis', () => {
  it('sends its scripts by SHA1, one EVALSHA for the gate and one for the verdict of each delivery', async () => {
    await admitAndSettle(1) // the scripts are loaded on first use
    await admin.config('RESETSTAT')
    await admitAndSettle(40)
    const calls = await commandCalls()
    expect(calls.get('evalsha')).toBe(80)
    expect(calls.get('eval') ?? 0).toBe(0)
  })

  it('pipelines the commands of deliveries admitted in the same turn', async () => {
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
    await admitAndSettle(10)
    expect(await guard.circuit(destination.id)).toMatchObject({ state: 'closed', failures: 0 })
  })
})
