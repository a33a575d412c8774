import type { Redis } from 'ioredis'
import type { Logger } from '../logger.js'
import { dataServers, type RedisConnection } from './connections.js'

/** What the queue's Redis says about keeping the jobs it is given. */
export interface RedisCondition {
  /** `maxmemory-policy`; undefined when Redis refused both CONFIG GET and INFO. */
  policy: string | undefined
  /** Where the policy was read: managed Redis often disables CONFIG but answers INFO. */
  policyFrom: 'config' | 'info' | 'refused'
  /** A write was refused with OOM: memory is full and nothing may (or can) be evicted. */
  refusingWrites: boolean
}

/** The one policy under which Redis never deletes a job to make room. */
export const SAFE_POLICY = 'noeviction'

const PROBE_TTL_MS = 60_000

/** Redis's answer to a write it refuses for memory, alone or inside a script's error. */
export function isOutOfMemory(error: unknown): boolean {
  return error instanceof Error && error.message.includes('OOM command not allowed')
}

/**
 * Reads the eviction policy and writes a small key that expires: Redis refuses that write with OOM
 * exactly when it refuses the queue's. Throws when Redis does not answer at all (readiness fails).
 * On a cluster the policy is every master's, the worst one reported; the probe key carries the
 * queue prefix's hash tag, so it lands on the master that holds the queue's keys.
 */
export async function inspectRedis(redis: RedisConnection, probeKey: string): Promise<RedisCondition> {
  const [policy, refusingWrites] = await Promise.all([worstPolicy(redis), refusesWrites(redis, probeKey)])
  return { ...policy, refusingWrites }
}

async function refusesWrites(redis: RedisConnection, probeKey: string): Promise<boolean> {
  try {
    await redis.set(probeKey, String(Date.now()), 'PX', PROBE_TTL_MS)
    return false
  } catch (error) {
    if (isOutOfMemory(error)) return true
    throw error
  }
}

/** A command Redis answered with an error (renamed, disabled, not permitted), not a lost connection. */
function refusedByRedis(error: unknown): boolean {
  return error instanceof Error && error.name === 'ReplyError'
}

type PolicyReading = Pick<RedisCondition, 'policy' | 'policyFrom'>

/** An evicting master first (it loses jobs), then one whose policy is unknown, then a safe one. */
async function worstPolicy(redis: RedisConnection): Promise<PolicyReading> {
  const readings = await Promise.all((await dataServers(redis)).map(readPolicy))
  return (
    readings.find(({ policy }) => policy !== undefined && policy !== SAFE_POLICY) ??
    readings.find(({ policy }) => policy === undefined) ??
    readings[0] ?? { policy: undefined, policyFrom: 'refused' }
  )
}

async function readPolicy(redis: Redis): Promise<PolicyReading> {
  try {
    const reply = await redis.config('GET', 'maxmemory-policy')
    if (Array.isArray(reply) && typeof reply[1] === 'string')
      return { policy: reply[1], policyFrom: 'config' }
  } catch (error) {
    if (!refusedByRedis(error)) throw error
  }
  try {
    const policy = /^maxmemory_policy:(\S+)/m.exec(await redis.info('memory'))?.[1]
    if (policy !== undefined) return { policy, policyFrom: 'info' }
  } catch (error) {
    if (!refusedByRedis(error)) throw error
  }
  return { policy: undefined, policyFrom: 'refused' }
}

/** What /readyz shows for a Redis that answers but cannot be trusted with jobs; empty when it can. */
export function redisProblems(condition: RedisCondition): string[] {
  const problems: string[] = []
  if (condition.policy !== undefined && condition.policy !== SAFE_POLICY) {
    problems.push(`evicting: maxmemory-policy is ${condition.policy}, must be ${SAFE_POLICY}`)
  }
  if (condition.refusingWrites) problems.push('refusing writes: out of memory (OOM)')
  return problems
}

export interface RedisWatch {
  /** Inspects Redis now and logs what changed; throws when Redis does not answer. */
  check(): Promise<RedisCondition>
  /** What the last check found; undefined before the first one answered. */
  last(): RedisCondition | undefined
  stop(): void
}

/** A policy that stays wrong is logged again this often, so it is not one line lost in a day's log. */
const REMIND_MS = 60 * 60 * 1000

const POLICY_FIX =
  'CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in redis.conf); on managed ' +
  "Redis set the provider's parameter (an ElastiCache or MemoryDB parameter group, Azure Cache or " +
  'Memorystore maxmemory-policy setting) to noeviction'

/**
 * Watches the queue's Redis from start, every `intervalMs`, and on each /readyz: an evicting policy
 * deletes queued jobs when memory fills, and a full Redis refuses new ones; the ledger keeps every
 * row either way, but events wait for the relay. Each change is logged once (an evicting policy
 * again every hour); a Redis that refuses CONFIG and INFO is a warning, not a failure.
 */
export function watchRedis(deps: {
  inspect: () => Promise<RedisCondition>
  logger: Logger
  intervalMs: number
}): RedisWatch {
  const { logger } = deps
  let last: RedisCondition | undefined
  let policyLoggedAt = 0

  const report = (now: RedisCondition) => {
    const policyChanged =
      last === undefined || last.policy !== now.policy || last.policyFrom !== now.policyFrom
    const evicting = now.policy !== undefined && now.policy !== SAFE_POLICY
    if (evicting && (policyChanged || Date.now() - policyLoggedAt >= REMIND_MS)) {
      policyLoggedAt = Date.now()
      logger.error(
        { policy: now.policy, readFrom: now.policyFrom, fix: POLICY_FIX },
        `Redis maxmemory-policy is ${now.policy}, not ${SAFE_POLICY}: Redis deletes queued jobs when its memory fills. ` +
          'The ledger keeps every event and the relay re-enqueues them, but they wait until it does. ' +
          'Fix: CONFIG SET maxmemory-policy noeviction',
      )
    } else if (policyChanged && now.policy === undefined) {
      logger.warn(
        { fix: POLICY_FIX },
        `Redis refused CONFIG GET and INFO: its maxmemory-policy is unknown. Make sure it is ${SAFE_POLICY}`,
      )
    } else if (policyChanged && last?.policy !== undefined && now.policy === SAFE_POLICY) {
      logger.info({ policy: now.policy }, `Redis maxmemory-policy is ${SAFE_POLICY} again`)
    }
    if (now.refusingWrites && last?.refusingWrites !== true) {
      logger.error(
        { policy: now.policy },
        'Redis refuses writes (OOM: maxmemory reached): no event gets a job until it has room. Events are ' +
          'still accepted into the ledger and the relay enqueues them once Redis takes writes. Fix: raise ' +
          'maxmemory, or free memory',
      )
    } else if (!now.refusingWrites && last?.refusingWrites === true) {
      logger.info('Redis accepts writes again')
    }
    last = now
  }

  const check = async () => {
    const condition = await deps.inspect()
    report(condition)
    return condition
  }
  const timer = setInterval(() => {
    // Redis unreachable: readiness and the enqueues that fail say so.
    check().catch((error: unknown) => logger.debug({ err: error }, 'Redis check failed'))
  }, deps.intervalMs)
  timer.unref()
  return { check, last: () => last, stop: () => clearInterval(timer) }
}
