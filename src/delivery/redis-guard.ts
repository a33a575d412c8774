import { RateLimiterRedis } from 'rate-limiter-flexible'
import type { Logger } from '../logger.js'
import type { RedisConnection } from '../queue/connections.js'
import { createGuard, type DestinationGuard, type GuardEvents, type GuardStore } from './guard.js'
import { consumeOrWait } from './memory-guard.js'

// Every script reads the clock of Redis (TIME), not of the calling process, so worker processes on
// machines whose clocks disagree still agree on when a circuit opened and when it may close.
const NOW = `local t = redis.call('time') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`

/** KEYS: circuit hash, probe, pause. ARGV: probe ttl ms, token. A closed circuit answers its failures. */
const GATE = `${NOW}
local circuit = redis.call('hmget', KEYS[1], 'openUntil', 'failures')
local openUntil = tonumber(circuit[1] or '0')
if openUntil > now then return {'open', openUntil - now} end
local pausedUntil = tonumber(redis.call('get', KEYS[3]) or '0')
if pausedUntil > now then return {'paused', pausedUntil - now} end
if openUntil == 0 then return {'closed', tonumber(circuit[2] or '0')} end
if redis.call('set', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1]) then return {'probe', 0} end
return {'probing', 0}`

/** KEYS: circuit hash, probe, pause. ARGV: verdict, probe token, threshold, cool-down ms, retry-after ms. */
const RECORD = `${NOW}
local isProbe = ARGV[2] ~= '' and redis.call('get', KEYS[2]) == ARGV[2]
if isProbe then redis.call('del', KEYS[2]) end
local retryAfter = tonumber(ARGV[5])
if retryAfter > 0 then
  local pausedUntil = tonumber(redis.call('get', KEYS[3]) or '0')
  if now + retryAfter > pausedUntil then redis.call('set', KEYS[3], now + retryAfter, 'PX', retryAfter) end
end
if ARGV[1] == 'success' or (ARGV[1] == 'neutral' and isProbe) then
  redis.call('hset', KEYS[1], 'failures', 0, 'openUntil', 0)
  return 0
end
if ARGV[1] ~= 'failure' then return 0 end
local failures = redis.call('hincrby', KEYS[1], 'failures', 1)
local openUntil = tonumber(redis.call('hget', KEYS[1], 'openUntil') or '0')
if isProbe or (openUntil == 0 and failures >= tonumber(ARGV[3])) then
  redis.call('hset', KEYS[1], 'openUntil', now + tonumber(ARGV[4]))
  return 1
end
return 0`

/** KEYS: probe. ARGV: token. */
const RELEASE_PROBE = `if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end return 0`

/** KEYS: slots (a sorted set of token → expiry). ARGV: cap, token, ttl ms. */
const ACQUIRE_SLOT = `${NOW}
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`

/** A Lua script of this file run by its SHA1 (EVALSHA): its keys first, then its arguments. */
type Script = (...keysAndArgs: Array<string | number>) => Promise<unknown>

/**
 * Defines `lua` on the connection as a command, which ioredis sends as EVALSHA (loading the script
 * first when Redis lost its cache: a restart, SCRIPT FLUSH, another cluster node) and can pipeline
 * with the others (guardConnection). EVAL sent each script's whole text with every delivery.
 */
function script(redis: RedisConnection, name: string, numberOfKeys: number, lua: string): Script {
  redis.defineCommand(name, { numberOfKeys, lua })
  const command = (redis as unknown as Record<string, Script>)[name]
  if (command === undefined) throw new Error(`ioredis did not define the script ${name}`)
  return (...keysAndArgs) => command.apply(redis, keysAndArgs)
}

/**
 * How long a worker process lets deliveries through a closed circuit it read from Redis without
 * asking again. Its own failures and Retry-After answers make it ask at the next delivery; a circuit
 * another process opened, or a pause it recorded, reaches this one at most twice this late (one
 * period, then one more while a delivery reads the circuit again). Past that, a delivery asks Redis
 * itself, and waits when Redis does not answer.
 */
export const CLOSED_CIRCUIT_RECHECK_MS = 100

/** A closed circuit as this process last read it from Redis. */
interface ClosedCircuit {
  /** Until then (this process's clock) a delivery goes without asking Redis. */
  recheckAt: number
  /** A delivery is reading the circuit again. */
  rechecking: boolean
  /** The consecutive failures Redis counted then, or 0 once a success of this process reset them. */
  failures: number
}

/**
 * The guard for BullMQ deployments: every worker process reads and writes the same keys under the
 * deployment's queue prefix, so a destination's limits hold across all of them. Rate limits are
 * rate-limiter-flexible's fixed one-second windows; slots, circuits and pauses are short Lua scripts,
 * each atomic in Redis.
 */
export function createRedisGuard(
  redis: RedisConnection,
  prefix: string,
  logger: Logger,
  events: GuardEvents = {},
): DestinationGuard {
  // A script's keys must share a hash slot on a Redis Cluster: Redis hashes the first {…} of a key,
  // the prefix's own tag on a cluster (src/queue/jobs.ts) and the destination's on one server.
  const key = (id: string, part: string) => `${prefix}:dest:{${id}}:${part}`
  const limiters = new Map<number, RateLimiterRedis>()
  // Asking Redis at every delivery cost `serve` about a quarter of its CPU per event in the intake
  // (README, "A closed circuit read once per 100 ms"): a healthy destination needs neither the
  // gate nor a success's reset of a count that is already 0.
  const closedCircuits = new Map<string, ClosedCircuit>()
  // Counts the verdicts that dropped a circuit this process knew. A gate answered after one of them
  // may have been read before that verdict's write (one pipeline, the gate first): its 'closed' is
  // not kept, or a failure that opened the circuit would be followed by a period of deliveries.
  let verdictsThatDropped = 0
  const gate = script(redis, 'hookledgerGuardGate', 3, GATE)
  const record = script(redis, 'hookledgerGuardRecord', 3, RECORD)
  const releaseProbe = script(redis, 'hookledgerGuardReleaseProbe', 1, RELEASE_PROBE)
  const acquireSlot = script(redis, 'hookledgerGuardAcquireSlot', 1, ACQUIRE_SLOT)
  const store: GuardStore = {
    async gate(id, probeTtlMs, token) {
      const known = closedCircuits.get(id)
      const now = Date.now()
      // One delivery reads the circuit again; those admitted while it does go as before (for one
      // more period at most: a Redis that stopped answering must not leave them unguarded), so a
      // worker's deliveries of one turn do not all ask at once.
      if (
        known !== undefined &&
        (now < known.recheckAt || (known.rechecking && now < known.recheckAt + CLOSED_CIRCUIT_RECHECK_MS))
      ) {
        return { kind: 'closed' }
      }
      if (known !== undefined) known.rechecking = true
      const droppedBefore = verdictsThatDropped
      let answer: [string, number]
      try {
        answer = (await gate(key(id, 'circuit'), key(id, 'probe'), key(id, 'pause'), probeTtlMs, token)) as [
          string,
          number,
        ]
      } catch (error) {
        // Redis did not answer: the next delivery asks too (and waits, as the guard does then).
        closedCircuits.delete(id)
        throw error
      }
      // The number is the wait of an open or paused circuit, the failures of a closed one.
      const [kind, number] = answer
      if (kind === 'closed' && verdictsThatDropped === droppedBefore) {
        closedCircuits.set(id, {
          recheckAt: Date.now() + CLOSED_CIRCUIT_RECHECK_MS,
          rechecking: false,
          failures: Number(number),
        })
      } else {
        closedCircuits.delete(id)
      }
      switch (kind) {
        case 'closed':
          return { kind }
        case 'probe':
          return { kind, token }
        case 'open':
        case 'paused':
        case 'probing':
          return { kind, waitMs: Number(number) }
        default:
          throw new Error(`unexpected circuit gate '${kind}'`)
      }
    },
    async record(id, verdict, { probeToken, threshold, coolDownMs, retryAfterMs }) {
      const known = closedCircuits.get(id)
      if (probeToken === undefined && retryAfterMs <= 0) {
        // The script would write nothing: a neutral answer outside a probe, or a success whose
        // reset finds no failures (as of this process's last read).
        if (verdict === 'neutral') return false
        if (verdict === 'success' && known?.failures === 0) return false
      }
      if (verdict === 'failure' || retryAfterMs > 0) {
        // This verdict may open the circuit or pause the destination: the next delivery asks.
        closedCircuits.delete(id)
        verdictsThatDropped += 1
      } else if (verdict === 'success' && known !== undefined) {
        known.failures = 0
      }
      const opened = await record(
        key(id, 'circuit'),
        key(id, 'probe'),
        key(id, 'pause'),
        verdict,
        probeToken ?? '',
        threshold,
        coolDownMs,
        Math.round(retryAfterMs),
      )
      return opened === 1
    },
    async releaseProbe(id, token) {
      await releaseProbe(key(id, 'probe'), token)
    },
    async acquireSlot(id, cap, token, ttlMs) {
      return (await acquireSlot(key(id, 'slots'), cap, token, ttlMs)) === 1
    },
    async releaseSlot(id, token) {
      await redis.zrem(key(id, 'slots'), token)
    },
    async consumeRate(id, perSecond) {
      let limiter = limiters.get(perSecond)
      if (limiter === undefined) {
        limiter = new RateLimiterRedis({
          storeClient: redis,
          keyPrefix: `${prefix}:rate:${perSecond}`,
          points: perSecond,
          duration: 1,
        })
        limiters.set(perSecond, limiter)
      }
      return consumeOrWait(limiter, id)
    },
    async view(id) {
      const [failures, openUntil] = await redis.hmget(key(id, 'circuit'), 'failures', 'openUntil')
      return { failures: Number(failures ?? 0), openUntil: Number(openUntil ?? 0) }
    },
    async close() {
      redis.disconnect()
    },
  }
  return createGuard(store, logger, events)
}
