import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible'
import type { Logger } from '../logger.js'
import { createGuard, type DestinationGuard, type GuardEvents, type GuardStore } from './guard.js'

interface Circuit {
  failures: number
  /** 0 while closed; once past, the circuit is half-open. */
  openUntil: number
  /** Pause asked for by a Retry-After. */
  pausedUntil: number
  probe: { token: string; until: number } | undefined
}

/**
 * The guard with the in-process queue: one process runs every delivery, so its memory is the whole
 * picture. The same policy as the Redis store (redis-guard.ts), the same library for the rate limit.
 */
export function createMemoryGuard(logger: Logger, events: GuardEvents = {}): DestinationGuard {
  const circuits = new Map<string, Circuit>()
  const slots = new Map<string, Map<string, number>>()
  const limiters = new Map<string, RateLimiterMemory>()
  const circuitOf = (id: string): Circuit => {
    let circuit = circuits.get(id)
    if (circuit === undefined) {
      circuit = { failures: 0, openUntil: 0, pausedUntil: 0, probe: undefined }
      circuits.set(id, circuit)
    }
    return circuit
  }
  const store: GuardStore = {
    async gate(id, probeTtlMs, token) {
      const now = Date.now()
      const circuit = circuitOf(id)
      if (circuit.openUntil > now) return { kind: 'open', waitMs: circuit.openUntil - now }
      if (circuit.pausedUntil > now) return { kind: 'paused', waitMs: circuit.pausedUntil - now }
      if (circuit.openUntil === 0) return { kind: 'closed' }
      if (circuit.probe !== undefined && circuit.probe.until > now) return { kind: 'probing', waitMs: 0 }
      circuit.probe = { token, until: now + probeTtlMs }
      return { kind: 'probe', token }
    },
    async record(id, verdict, { probeToken, threshold, coolDownMs, retryAfterMs }) {
      const now = Date.now()
      const circuit = circuitOf(id)
      const isProbe = probeToken !== undefined && circuit.probe?.token === probeToken
      if (isProbe) circuit.probe = undefined
      if (retryAfterMs > 0) circuit.pausedUntil = Math.max(circuit.pausedUntil, now + retryAfterMs)
      if (verdict === 'success' || (verdict === 'neutral' && isProbe)) {
        circuit.failures = 0
        circuit.openUntil = 0
        return false
      }
      if (verdict !== 'failure') return false
      circuit.failures += 1
      if (isProbe || (circuit.openUntil === 0 && circuit.failures >= threshold)) {
        circuit.openUntil = now + coolDownMs
        return true
      }
      return false
    },
    async releaseProbe(id, token) {
      const circuit = circuitOf(id)
      if (circuit.probe?.token === token) circuit.probe = undefined
    },
    async acquireSlot(id, cap, token, ttlMs) {
      const now = Date.now()
      let held = slots.get(id)
      if (held === undefined) {
        held = new Map()
        slots.set(id, held)
      }
      for (const [other, until] of held) if (until <= now) held.delete(other)
      if (held.size >= cap) return false
      held.set(token, now + ttlMs)
      return true
    },
    async releaseSlot(id, token) {
      slots.get(id)?.delete(token)
    },
    async consumeRate(id, perSecond) {
      let limiter = limiters.get(id)
      if (limiter === undefined || limiter.points !== perSecond) {
        limiter = new RateLimiterMemory({ points: perSecond, duration: 1 })
        limiters.set(id, limiter)
      }
      return consumeOrWait(limiter, id)
    },
    async view(id) {
      const circuit = circuitOf(id)
      return { failures: circuit.failures, openUntil: circuit.openUntil }
    },
    async close() {},
  }
  return createGuard(store, logger, events)
}

/**
 * One point from a rate-limiter-flexible limiter: 0 when taken, else the wait until the next window.
 * The library rejects with a RateLimiterRes when the window is spent and with an Error when its
 * store fails; only the first is a wait.
 */
export async function consumeOrWait(limiter: { consume(key: string): Promise<unknown> }, key: string) {
  try {
    await limiter.consume(key)
    return 0
  } catch (rejection) {
    if (rejection instanceof RateLimiterRes) return Math.max(rejection.msBeforeNext, 1)
    throw rejection
  }
}
