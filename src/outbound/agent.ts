import { randomUUID } from 'node:crypto'
import { sql } from 'drizzle-orm'
import type { EffectClass } from '../db/outbound-schema.js'
import { assertNever, decide } from './decision.js'
import { payloadHash } from './hash.js'
import type { OutboundLedger } from './ledger.js'
import type { InvokeOutcome } from './outcomes.js'
import {
  claimOperation,
  findOperation,
  type Held,
  LeaseLostError,
  latestAttempt,
  recordUndoRef,
  startAttempt,
  transition,
} from './store.js'

/**
 * The guard for agents in any language, over HTTP: the same claim and decision table as
 * `ledger.invoke`, but the agent makes the call itself and reports what happened. Between calls the
 * ledger holds the lease; an agent that dies simply lets it expire (the crash window, read per class).
 */
export interface AgentClaimRequest {
  key: string
  tool: string
  effect: EffectClass
  args: unknown
  runId?: string | undefined
  traceId?: string | undefined
  toolCallId?: string | undefined
}

export type AgentClaim =
  /** Call the tool now with `attemptKey` as the idempotency key; compensable: record the undo first. */
  | {
      kind: 'execute'
      operationId: string
      leaseToken: string
      leaseUntil: Date
      attempt: number
      attemptKey: string
      undoRefRequired: boolean
    }
  /** Run this undo (with the attempt's key) before anything else; report it, then claim again. */
  | {
      kind: 'undo'
      operationId: string
      leaseToken: string
      attempt: number
      attemptKey: string
      undoRef: unknown
    }
  | InvokeOutcome

export type AgentReport =
  | {
      kind: 'recorded'
      outcome: InvokeOutcome | { kind: 'claim_again'; operationId: string; retryAfterMs: number }
    }
  | { kind: 'not_found' }
  | { kind: 'lease_lost' }
  | { kind: 'attempt_mismatch'; message: string }

const AGENT = 'agent'

export function agentProtocol(ledger: OutboundLedger) {
  const { db, settings } = ledger
  const leaseMs = settings.leaseMs

  /** Decides the next step for a held operation; execute and undo are handed to the agent. */
  const nextStep = async (held: Held, approved: boolean): Promise<AgentClaim> => {
    const last = await latestAttempt(db, held.op.id)
    if (held.op.effectClass === 'compensable' && last?.status === 'unknown' && last.undoRef === null) {
      // Without a recorded undo nothing can be compensated: someone has to look.
      const moved = await ledger.moveToReconciliation(held, 'unknown_without_undo_ref')
      return {
        kind: 'needs_reconciliation',
        operationId: moved.operationId,
        reason: 'unknown_without_undo_ref',
      }
    }
    const step = decide({
      effect: held.op.effectClass,
      last: last === undefined ? undefined : { status: last.status, hasUndoRef: last.undoRef !== null },
      roundAttempts: held.op.roundAttempts,
      maxAttempts: settings.maxAttempts,
      approved,
    })
    switch (step.kind) {
      case 'execute': {
        const started = await startAttempt(db, held, { leaseMs, closeLast: step.closeLast })
        return {
          kind: 'execute',
          operationId: held.op.id,
          leaseToken: held.leaseToken,
          leaseUntil: started.leaseUntil,
          attempt: started.attempt,
          attemptKey: started.attemptKey,
          undoRefRequired: held.op.effectClass === 'compensable',
        }
      }
      case 'undo': {
        if (last === undefined) throw new Error('undo step without an attempt')
        await transition(db, held, {
          set: { leaseUntil: sql`now() + ${`${leaseMs} milliseconds`}::interval` },
          event: 'undo_started',
          details: { attempt: last.attempt, attemptKey: last.attemptKey },
          ...(step.closeLast === null
            ? {}
            : { attempt: { attempt: last.attempt, status: 'unknown' as const } }),
        })
        return {
          kind: 'undo',
          operationId: held.op.id,
          leaseToken: held.leaseToken,
          attempt: last.attempt,
          attemptKey: last.attemptKey,
          undoRef: last.undoRef,
        }
      }
      case 'needs_reconciliation': {
        const attempt = step.closeLast === null || last === undefined ? undefined : last
        await ledger.moveToReconciliation(held, step.reason, attempt)
        return { kind: 'needs_reconciliation', operationId: held.op.id, reason: step.reason }
      }
      case 'exhausted':
        return ledger.moveToExhausted(held, last, step.closeLast !== null)
      case 'failed':
        return ledger.moveToUndoneFailure(held, step.reason)
      default:
        return assertNever(step)
    }
  }

  /**
   * Hands the operation back after an unknown outcome or an undo: the lease is given to nobody and
   * runs out after the backoff delay, so the agent's next claim cannot come sooner than the table allows.
   */
  const release = async (held: Held, delayMs: number) => {
    await transition(db, held, {
      set: { leaseToken: randomUUID(), leaseUntil: sql`now() + ${`${delayMs} milliseconds`}::interval` },
      event: 'released',
      details: { retryAfterMs: delayMs },
    })
    return { kind: 'claim_again' as const, operationId: held.op.id, retryAfterMs: delayMs }
  }

  /** Finds the leased operation and its attempt in flight, or says why the report does not apply. */
  const heldFor = async (key: string, leaseToken: string, attempt: number) => {
    const op = await findOperation(db, key)
    if (op === undefined) return { kind: 'not_found' } as const
    if (op.leaseToken !== leaseToken) return { kind: 'lease_lost' } as const
    const last = await latestAttempt(db, op.id)
    if (last === undefined || last.attempt !== attempt) {
      return { kind: 'attempt_mismatch', message: `attempt ${attempt} is not the newest attempt` } as const
    }
    return { kind: 'held', held: { op, leaseToken, actor: AGENT } as Held, last } as const
  }

  const guarded = async (run: () => Promise<AgentReport>): Promise<AgentReport> => {
    try {
      return await run()
    } catch (error) {
      if (error instanceof LeaseLostError) return { kind: 'lease_lost' }
      throw error
    }
  }

  return {
    async claim(request: AgentClaimRequest): Promise<AgentClaim> {
      const claim = await claimOperation(db, {
        ...request,
        payloadHash: payloadHash(request.args),
        leaseMs,
        actor: AGENT,
      })
      if (claim.kind !== 'claimed') return ledger.answerFor(claim)
      try {
        return await nextStep({ op: claim.op, leaseToken: claim.leaseToken, actor: AGENT }, claim.approved)
      } catch (error) {
        if (error instanceof LeaseLostError)
          return { kind: 'retry_later', operationId: claim.op.id, retryAfterMs: 1000 }
        throw error
      }
    },

    /** Must come before the call for a compensable tool: the undo is known before anything can need it. */
    async recordUndoRef(
      key: string,
      leaseToken: string,
      attempt: number,
      undoRef: unknown,
    ): Promise<AgentReport> {
      return guarded(async () => {
        const found = await heldFor(key, leaseToken, attempt)
        if (found.kind !== 'held') return found
        if (found.last.status !== 'in_flight') {
          return {
            kind: 'attempt_mismatch',
            message: `attempt ${attempt} is ${found.last.status}, not in flight`,
          }
        }
        await recordUndoRef(db, found.held, attempt, undoRef)
        return {
          kind: 'recorded',
          outcome: { kind: 'claim_again', operationId: found.held.op.id, retryAfterMs: 0 },
        }
      })
    },

    async recordOutcome(
      key: string,
      leaseToken: string,
      attempt: number,
      outcome:
        | { kind: 'success'; result?: unknown; downstreamId?: string | undefined }
        | { kind: 'rejection'; error: string }
        | { kind: 'unknown'; error: string },
    ): Promise<AgentReport> {
      return guarded(async () => {
        const found = await heldFor(key, leaseToken, attempt)
        if (found.kind !== 'held') return found
        const { held, last } = found
        if (last.status !== 'in_flight') {
          return { kind: 'attempt_mismatch', message: `attempt ${attempt} is ${last.status}, not in flight` }
        }
        switch (outcome.kind) {
          case 'success': {
            const op = await transition(db, held, {
              set: {
                status: 'completed',
                resultJson: outcome.result ?? null,
                downstreamId: outcome.downstreamId ?? null,
                lastError: null,
                leaseToken: null,
                leaseUntil: null,
                completedAt: sql`now()`,
              },
              event: 'succeeded',
              details: { attempt, downstreamId: outcome.downstreamId },
              attempt: { attempt, status: 'succeeded' },
            })
            return {
              kind: 'recorded',
              outcome: {
                kind: 'completed',
                operationId: op.id,
                result: op.resultJson,
                downstreamId: op.downstreamId,
                replayed: false,
              },
            }
          }
          case 'rejection': {
            const op = await transition(db, held, {
              set: { status: 'failed', lastError: outcome.error, leaseToken: null, leaseUntil: null },
              event: 'rejected',
              details: { attempt },
              attempt: { attempt, status: 'rejected', error: outcome.error },
            })
            return {
              kind: 'recorded',
              outcome: {
                kind: 'failed',
                operationId: op.id,
                reason: 'rejected',
                error: outcome.error,
                details: null,
              },
            }
          }
          case 'unknown': {
            await transition(db, held, {
              set: { lastError: outcome.error },
              event: 'outcome_unknown',
              details: { attempt, error: outcome.error },
              attempt: { attempt, status: 'unknown', error: outcome.error },
            })
            const next = await nextStepWithoutActing(held)
            if (next !== undefined) return { kind: 'recorded', outcome: next }
            const policy = ledger.retryPolicy({})
            const delay = Math.min(
              policy.baseDelayMs * 2 ** Math.max(0, held.op.roundAttempts - 1),
              policy.maxDelayMs,
            )
            return { kind: 'recorded', outcome: await release(held, delay) }
          }
          default:
            return assertNever(outcome)
        }
      })
    },

    async recordUndoOutcome(
      key: string,
      leaseToken: string,
      attempt: number,
      outcome: { kind: 'success' } | { kind: 'failure'; error: string },
    ): Promise<AgentReport> {
      return guarded(async () => {
        const found = await heldFor(key, leaseToken, attempt)
        if (found.kind !== 'held') return found
        const { held, last } = found
        if (last.status !== 'unknown' && last.status !== 'undo_failed') {
          return {
            kind: 'attempt_mismatch',
            message: `attempt ${attempt} is ${last.status}; there is no undo to report`,
          }
        }
        if (outcome.kind === 'success') {
          await transition(db, held, {
            set: {},
            event: 'compensated',
            details: { attempt },
            attempt: { attempt, status: 'compensated' },
          })
          const next = await nextStepWithoutActing(held)
          return { kind: 'recorded', outcome: next ?? (await release(held, 0)) }
        }
        await transition(db, held, {
          set: { lastError: `undo failed: ${outcome.error}` },
          event: 'undo_failed',
          details: { attempt, error: outcome.error },
          attempt: { attempt, status: 'undo_failed', error: outcome.error },
        })
        const moved = await ledger.moveToReconciliation(held, 'undo_failed')
        return {
          kind: 'recorded',
          outcome: { kind: 'needs_reconciliation', operationId: moved.operationId, reason: 'undo_failed' },
        }
      })
    },
  }

  /**
   * Settles what the table settles without the agent (reconciliation, exhaustion, failure) and
   * answers undefined when the agent has more to do: then it claims again.
   */
  async function nextStepWithoutActing(held: Held): Promise<InvokeOutcome | undefined> {
    const last = await latestAttempt(db, held.op.id)
    if (held.op.effectClass === 'compensable' && last?.status === 'unknown' && last.undoRef === null) {
      await ledger.moveToReconciliation(held, 'unknown_without_undo_ref')
      return { kind: 'needs_reconciliation', operationId: held.op.id, reason: 'unknown_without_undo_ref' }
    }
    const step = decide({
      effect: held.op.effectClass,
      last: last === undefined ? undefined : { status: last.status, hasUndoRef: last.undoRef !== null },
      roundAttempts: held.op.roundAttempts,
      maxAttempts: settings.maxAttempts,
      approved: false,
    })
    if (step.kind === 'execute' || step.kind === 'undo') return undefined
    const next = await nextStep(held, false)
    return next.kind === 'execute' || next.kind === 'undo' ? undefined : next
  }
}

export type AgentProtocol = ReturnType<typeof agentProtocol>
