import { randomUUID } from 'node:crypto'
import type { Dispatcher } from 'undici'
import type { RouteForward } from '../config/routes.js'
import { settlesWithin } from '../deadline.js'
import type { Logger } from '../logger.js'

/**
 * A configured forward's destination: a route's, or a source's own forward (its one route). The guard
 * protects it by `id`; the forward tool (forward.ts) sends to `url` over `connections`.
 */
export interface Destination {
  /** `<source>/<route id>`: the key of its limits and circuit, its label on /metrics and in alerts. */
  id: string
  /** Its url, headers and time limit, and the limits the guard keeps. */
  forward: RouteForward
  url: URL
  /** Keep-alive connections to this destination only, reused by every event forwarded to it. */
  connections: Dispatcher
}

/** How one admitted delivery ended, as far as protecting its destination goes. */
export type DeliveryVerdict =
  | { kind: 'success' }
  /** A timeout, a 5xx or a connection error: counts towards opening the circuit. */
  | { kind: 'failure' }
  /** Any other answer (a 4xx): says nothing about the destination's health. */
  | { kind: 'neutral' }

export type Admission =
  | {
      kind: 'admitted'
      /**
       * Ends the delivery: frees its concurrency slot and feeds the circuit breaker. `retryAfterMs`
       * (a 429 or 503 answer's Retry-After) holds back every delivery to the destination that long.
       * This process's view of the circuit takes the verdict at once; the store's writes resolve the
       * promise, which never rejects (a store that fails them is logged), and close() waits for them.
       */
      settle(verdict: DeliveryVerdict, retryAfterMs?: number): Promise<void>
    }
  /** Not now: the delivery goes back to the queue for this long without using up an attempt. */
  | { kind: 'wait'; retryAfterMs: number; reason: string }

export type CircuitState = 'closed' | 'open' | 'half_open'

export interface CircuitView {
  state: CircuitState
  failures: number
  openUntil: Date | null
}

/**
 * Protects destinations from hookledger itself: a rate limit, a cap on deliveries in flight and a
 * circuit breaker per destination, shared by every worker process that uses the same store.
 */
export interface DestinationGuard {
  admit(destination: Destination): Promise<Admission>
  circuit(destinationId: string): Promise<CircuitView>
  close(): Promise<void>
}

/** What the circuit says about a delivery about to start. */
export type CircuitGate =
  | { kind: 'closed' }
  /** Half-open: this delivery is the one probe; its verdict closes or reopens the circuit. */
  | { kind: 'probe'; token: string }
  | { kind: 'open' | 'paused' | 'probing'; waitMs: number }

/**
 * The primitives a store gives the guard: Redis for every worker process of a deployment
 * (redis-guard.ts), or this process's memory with the in-process queue (memory-guard.ts). Each
 * primitive is atomic in its store.
 */
export interface GuardStore {
  gate(id: string, probeTtlMs: number, token: string): Promise<CircuitGate>
  /** Records a verdict; true when it opened the circuit. */
  record(
    id: string,
    verdict: DeliveryVerdict['kind'],
    options: { probeToken?: string | undefined; threshold: number; coolDownMs: number; retryAfterMs: number },
  ): Promise<boolean>
  /** Gives back a probe that never went out (the delivery had to wait after all). */
  releaseProbe(id: string, token: string): Promise<void>
  /** A slot among `cap`, held until released or `ttlMs` (a worker that died never releases). */
  acquireSlot(id: string, cap: number, token: string, ttlMs: number): Promise<boolean>
  releaseSlot(id: string, token: string): Promise<void>
  /** 0 when a delivery may go now, else how long until the next may. */
  consumeRate(id: string, perSecond: number): Promise<number>
  view(id: string): Promise<{ failures: number; openUntil: number }>
  close(): Promise<void>
}

/** How long a delivery waits when every concurrency slot is taken or a probe is already out. */
const SLOT_WAIT_MS = 250
/** When the store does not answer: the delivery waits rather than go out unguarded or fail. */
const STORE_DOWN_WAIT_MS = 1000
/** How long close() waits for the settles still writing to the store (a command's own timeout). */
const SETTLES_AT_CLOSE_MS = 1000

export interface GuardEvents {
  /** The circuit of this destination just opened (by this process's verdict). */
  onCircuitOpen?: (destinationId: string, coolDownMs: number) => void
}

/** The guard's one policy over either store. */
export function createGuard(store: GuardStore, logger: Logger, events: GuardEvents = {}): DestinationGuard {
  // Settles whose writes are under way: a delivery does not wait for them (deliver-forward.ts).
  const settling = new Set<Promise<void>>()
  const track = (writes: Promise<void>) => {
    settling.add(writes)
    void writes.finally(() => settling.delete(writes))
    return writes
  }
  return {
    async admit(destination) {
      try {
        return await admit(store, destination, events, logger, track)
      } catch (error) {
        logger.warn(
          { err: error, destination: destination.id },
          'destination limits cannot be checked; waiting',
        )
        return {
          kind: 'wait',
          retryAfterMs: STORE_DOWN_WAIT_MS,
          reason: 'destination limits cannot be checked now',
        }
      }
    },
    async circuit(destinationId) {
      const { failures, openUntil } = await store.view(destinationId)
      const state: CircuitState = openUntil === 0 ? 'closed' : openUntil > Date.now() ? 'open' : 'half_open'
      return { state, failures, openUntil: openUntil === 0 ? null : new Date(openUntil) }
    },
    async close() {
      await settlesWithin(Promise.all(settling), SETTLES_AT_CLOSE_MS)
      await store.close()
    },
  }
}

async function admit(
  store: GuardStore,
  destination: Destination,
  events: GuardEvents,
  logger: Logger,
  track: (writes: Promise<void>) => Promise<void>,
): Promise<Admission> {
  const { id, forward: limits } = destination
  const token = randomUUID()
  // A slot or a probe outlives the send it guards, so a worker that died mid-send frees it in time.
  const holdMs = limits.timeoutMs + 5000
  const gate = await store.gate(id, holdMs, token)
  switch (gate.kind) {
    case 'open':
      return { kind: 'wait', retryAfterMs: gate.waitMs, reason: `the circuit of ${id} is open` }
    case 'paused':
      return { kind: 'wait', retryAfterMs: gate.waitMs, reason: `${id} asked to wait (Retry-After)` }
    case 'probing':
      return {
        kind: 'wait',
        retryAfterMs: SLOT_WAIT_MS,
        reason: `the circuit of ${id} is half-open; a probe is out`,
      }
    case 'closed':
    case 'probe':
      break
  }
  const probeToken = gate.kind === 'probe' ? gate.token : undefined
  const release = async () => {
    if (probeToken !== undefined) await store.releaseProbe(id, probeToken)
  }
  if (limits.concurrency !== undefined && !(await store.acquireSlot(id, limits.concurrency, token, holdMs))) {
    await release()
    return {
      kind: 'wait',
      retryAfterMs: jitter(SLOT_WAIT_MS),
      reason: `${id} has ${limits.concurrency} deliveries in flight`,
    }
  }
  if (limits.rateLimit !== undefined) {
    const waitMs = await store.consumeRate(id, limits.rateLimit.perSecond)
    if (waitMs > 0) {
      if (limits.concurrency !== undefined) await store.releaseSlot(id, token)
      await release()
      return {
        kind: 'wait',
        retryAfterMs: jitter(waitMs),
        reason: `${id} is at its rate limit of ${limits.rateLimit.perSecond}/s`,
      }
    }
  }
  return {
    kind: 'admitted',
    settle(verdict, retryAfterMs) {
      // Both start in this turn: the verdict reaches this process's view of the circuit before the
      // next admit reads it, not one round trip to the store later.
      const released = limits.concurrency === undefined ? undefined : store.releaseSlot(id, token)
      const recorded = store.record(id, verdict.kind, {
        probeToken,
        threshold: limits.circuitBreaker.failureThreshold,
        coolDownMs: limits.circuitBreaker.coolDownMs,
        retryAfterMs: retryAfterMs ?? 0,
      })
      return track(
        Promise.all([released, recorded])
          .then(([, opened]) => {
            if (!opened) return
            logger.warn({ destination: id, coolDownMs: limits.circuitBreaker.coolDownMs }, 'circuit opened')
            events.onCircuitOpen?.(id, limits.circuitBreaker.coolDownMs)
          })
          .catch((error: unknown) => {
            // The delivery itself is recorded in the ledger; a slot left behind expires after holdMs.
            logger.warn(
              { err: error, destination: id },
              'could not record a delivery with its destination limits',
            )
          }),
      )
    },
  }
}

/** Spreads deliveries that waited for the same moment over the next quarter second. */
function jitter(ms: number): number {
  return ms + Math.floor(Math.random() * 250)
}
