import { randomUUID } from 'node:crypto'
import { assertNever } from '../assert.js'
import { backoffDelay } from '../backoff.js'
import { LeaseLostError } from '../db/lease.js'
import { findOperation, latestAttempt } from '../db/operation-queries.js'
import type { EffectClass, Held } from '../db/operation-rows.js'
import {
  claimOperation,
  recordRejection,
  recordSuccess,
  recordUndoFailure,
  recordUndoRef,
  recordUndoSuccess,
  recordUnknown,
  releaseFor,
  startAttempt,
  startUndo,
} from '../db/operations.js'
import { settleHeldFromEvidence } from './evidence.js'
import { payloadHash } from './hash.js'
import { machineOf, type OutboundLedger } from './ledger.js'
import { answerFor, type Machine, nextStep, policyOf, settleStep, toReconciliation } from './machine.js'
import type { InvokeOutcome } from './outcomes.js'

/**
 * The guard for agents in any language, over HTTP: the same claim and decision table as
 * `ledger.invoke`, but the agent makes the call itself and reports what happened. Between calls the
 * ledger holds the lease; an agent that dies simply lets it expire (the crash window, read per class).
 */
export interface AgentClaimRequest {
  /** The ledger key, in the agents' space (`agentLedgerKey`). */
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
      /** The key the ledger keeps it under (`agents/<key>`): what a provider echoes for evidence. */
      ledgerKey: string
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

/**
 * Who reports: the token's actor name for the audit (`agent:<token name>`) and the tools it may touch
 * (null: any). An operation of another tool is, to this caller, no operation at all.
 */
export interface AgentCaller {
  actor: string
  tools: ReadonlySet<string> | null
}

type ClaimAgain = { kind: 'claim_again'; operationId: string; retryAfterMs: number }
type AgentOutcome =
  | { kind: 'success'; result?: unknown; downstreamId?: string | undefined }
  | { kind: 'rejection'; error: string }
  | { kind: 'unknown'; error: string }

/**
 * The agents' side of the state machine: the same claim, decision table, retry policy and
 * transitions as `ledger.invoke`, with the call itself made by the agent in between.
 */
export function agentProtocol(ledger: OutboundLedger) {
  const machine = machineOf(ledger)
  return {
    claim: (request: AgentClaimRequest, caller: AgentCaller) => claim(machine, request, caller),
    /** Must come before the call for a compensable tool: the undo is known before anything can need it. */
    recordUndoRef: (
      caller: AgentCaller,
      key: string,
      leaseToken: string,
      attempt: number,
      undoRef: unknown,
    ) =>
      reported(machine, caller, key, leaseToken, attempt, async (held, last) => {
        if (last.status !== 'in_flight') return mismatch(attempt, last.status, 'not in flight')
        await recordUndoRef(machine.db, held, attempt, undoRef)
        return recorded({ kind: 'claim_again', operationId: held.op.id, retryAfterMs: 0 })
      }),
    recordOutcome: (
      caller: AgentCaller,
      key: string,
      leaseToken: string,
      attempt: number,
      outcome: AgentOutcome,
    ) =>
      reported(machine, caller, key, leaseToken, attempt, async (held, last) => {
        if (last.status !== 'in_flight') return mismatch(attempt, last.status, 'not in flight')
        return recorded(await recordAgentOutcome(machine, held, attempt, outcome))
      }),
    recordUndoOutcome: (
      caller: AgentCaller,
      key: string,
      leaseToken: string,
      attempt: number,
      outcome: { kind: 'success' } | { kind: 'failure'; error: string },
    ) =>
      reported(machine, caller, key, leaseToken, attempt, async (held, last) => {
        if (last.status !== 'unknown' && last.status !== 'undo_failed') {
          return mismatch(attempt, last.status, 'there is no undo to report')
        }
        if (outcome.kind === 'success') {
          await recordUndoSuccess(machine.db, held, attempt)
          return recorded(await handBack(machine, held, 0))
        }
        await recordUndoFailure(machine.db, held, attempt, outcome.error)
        return recorded(await toReconciliation(machine, held, 'undo_failed', undefined))
      }),
  }
}

export type AgentProtocol = ReturnType<typeof agentProtocol>

async function claim(machine: Machine, request: AgentClaimRequest, caller: AgentCaller): Promise<AgentClaim> {
  const { db, settings } = machine
  const claimed = await claimOperation(db, {
    ...request,
    payloadHash: payloadHash(request.args),
    leaseMs: settings.leaseMs,
    actor: caller.actor,
  })
  if (claimed.kind !== 'claimed') return answerFor(db, claimed)
  const held: Held = { op: claimed.op, leaseToken: claimed.leaseToken, actor: caller.actor }
  try {
    const { step, last } = await nextStep(machine, held, claimed.approved)
    switch (step.kind) {
      case 'execute': {
        const started = await startAttempt(db, held, { leaseMs: settings.leaseMs, closeLast: step.closeLast })
        return {
          kind: 'execute',
          operationId: held.op.id,
          ledgerKey: held.op.operationKey,
          leaseToken: held.leaseToken,
          leaseUntil: started.leaseUntil,
          attempt: started.attempt,
          attemptKey: started.attemptKey,
          undoRefRequired: held.op.effectClass === 'compensable',
        }
      }
      case 'undo': {
        if (last === undefined) throw new Error('undo step without an attempt')
        await startUndo(db, held, last, settings.leaseMs, step.closeLast !== null)
        return {
          kind: 'undo',
          operationId: held.op.id,
          leaseToken: held.leaseToken,
          attempt: last.attempt,
          attemptKey: last.attemptKey,
          undoRef: last.undoRef,
        }
      }
      default:
        return await settleStep(machine, held, step, last)
    }
  } catch (error) {
    if (error instanceof LeaseLostError)
      return { kind: 'retry_later', operationId: claimed.op.id, retryAfterMs: 1000 }
    throw error
  }
}

async function recordAgentOutcome(
  machine: Machine,
  held: Held,
  attempt: number,
  outcome: AgentOutcome,
): Promise<InvokeOutcome | ClaimAgain> {
  const { db } = machine
  switch (outcome.kind) {
    case 'success': {
      const op = await recordSuccess(db, held, attempt, outcome)
      return {
        kind: 'completed',
        operationId: op.id,
        result: op.resultJson,
        downstreamId: op.downstreamId,
        replayed: false,
      }
    }
    case 'rejection': {
      const op = await recordRejection(db, held, attempt, outcome.error)
      return { kind: 'failed', operationId: op.id, reason: 'rejected', error: outcome.error, details: null }
    }
    case 'unknown': {
      await recordUnknown(db, held, attempt, outcome.error)
      const settled = await settleHeldFromEvidence(db, held)
      if (settled !== undefined) return settled
      // The tool's own bounded backoff, as `invoke` waits it between two attempts in process.
      const delay = backoffDelay(policyOf(machine, held.op.tool), held.op.roundAttempts)
      return handBack(machine, held, delay)
    }
    default:
      return assertNever(outcome)
  }
}

/**
 * After a report: settles what the table settles without the agent (reconciliation, exhaustion,
 * failure), or hands the operation back with a lease given to nobody that runs out after `delayMs`,
 * so the agent's next claim cannot come sooner than the table allows.
 */
async function handBack(machine: Machine, held: Held, delayMs: number): Promise<InvokeOutcome | ClaimAgain> {
  const { step, last } = await nextStep(machine, held, false)
  if (step.kind !== 'execute' && step.kind !== 'undo') return settleStep(machine, held, step, last)
  await releaseFor(machine.db, held, delayMs, randomUUID())
  return { kind: 'claim_again', operationId: held.op.id, retryAfterMs: delayMs }
}

const recorded = (outcome: InvokeOutcome | ClaimAgain): AgentReport => ({ kind: 'recorded', outcome })
const mismatch = (attempt: number, status: string, what: string): AgentReport => ({
  kind: 'attempt_mismatch',
  message: `attempt ${attempt} is ${status}, ${what}`,
})

/** Finds the leased operation and its newest attempt, or says why the report does not apply. */
async function reported(
  machine: Machine,
  caller: AgentCaller,
  key: string,
  leaseToken: string,
  attempt: number,
  apply: (held: Held, last: NonNullable<Awaited<ReturnType<typeof latestAttempt>>>) => Promise<AgentReport>,
): Promise<AgentReport> {
  const op = await findOperation(machine.db, key)
  if (op === undefined || (caller.tools !== null && !caller.tools.has(op.tool))) return { kind: 'not_found' }
  if (op.leaseToken !== leaseToken) return { kind: 'lease_lost' }
  const last = await latestAttempt(machine.db, op.id)
  if (last === undefined || last.attempt !== attempt) {
    return { kind: 'attempt_mismatch', message: `attempt ${attempt} is not the newest attempt` }
  }
  try {
    return await apply({ op, leaseToken, actor: caller.actor }, last)
  } catch (error) {
    if (error instanceof LeaseLostError) return { kind: 'lease_lost' }
    throw error
  }
}
