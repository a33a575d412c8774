import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { assertNever } from '../assert.js'
import { backoffDelay } from '../backoff.js'
import { AGENT_SPACE, MAX_KEY_LENGTH } from '../config/operation-keys.js'
import { LeaseLostError } from '../db/lease.js'
import { operationBatches } from '../db/operation-batches.js'
import { type AttemptRow, type Held, json } from '../db/operation-rows.js'
import {
  claimOperation,
  recordRejection,
  recordSuccess,
  recordUndoFailure,
  recordUndoSuccess,
  recordUnknown,
  startAttempt,
  startUndo,
} from '../db/operations.js'
import { callExecute, callUndo } from './calls.js'
import { settleHeldFromEvidence } from './evidence.js'
import { payloadHash } from './hash.js'
import { agentKeyOf } from './keys.js'
import {
  answerFor,
  type Machine,
  nextStep,
  policyOf,
  settleStep,
  toolLeaseMs,
  toReconciliation,
} from './machine.js'
import type { InvokeOutcome } from './outcomes.js'
import type { Tool } from './tools.js'

export interface InvokeRequest<A> {
  /** From `stepKey(...)` or `ctx.invoke`: the runtime's key, never one a model made up. */
  key: string
  args: A
  /** Observability only: stored, never used to decide whether the effect already happened. */
  runId?: string
  traceId?: string
  toolCallId?: string
}

// Each step of the loop below starts an attempt or settles one, and rounds are capped, so this only
// guards against a bug turning the decision table into a loop.
const MAX_STEPS = 64

/** The in-process guard: claims the key, then runs the decision table until the operation settles. */
export async function invoke<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  request: InvokeRequest<A>,
): Promise<InvokeOutcome<R>> {
  if (request.key.length === 0 || request.key.length > MAX_KEY_LENGTH) {
    throw new TypeError(`operation keys are 1-${MAX_KEY_LENGTH} characters`)
  }
  if (agentKeyOf(request.key) !== undefined) {
    throw new TypeError(`operation keys starting with '${AGENT_SPACE}' belong to the agents' API`)
  }
  const hash = payloadHash(request.args)
  const leaseMs = toolLeaseMs(machine.settings, tool as Tool<never, unknown>)
  // The common case, in one statement shared with concurrent invokes: a key never seen, claimed with
  // its first attempt in flight. A key seen before takes the one-by-one claim.
  const leaseToken = randomUUID()
  const fresh = await operationBatches(machine.db.$genericPlans).claimFresh.run({
    key: request.key,
    tool: tool.name,
    effect: tool.effect,
    payloadHash: hash,
    argsJson: json(request.args) ?? 'null',
    leaseToken,
    leaseMs,
    actor: 'runtime',
    undoRefJson: json(undoRefFor(tool)?.(request.key)),
    runId: request.runId ?? null,
    traceId: request.traceId ?? null,
    toolCallId: request.toolCallId ?? null,
  })
  if (fresh !== undefined) {
    const held: Held = { op: fresh, leaseToken, actor: 'runtime' }
    return leaseGuarded(machine, held, () => runFirstAttempt(machine, tool, request, held))
  }
  const claim = await claimOperation(machine.db, {
    key: request.key,
    tool: tool.name,
    effect: tool.effect,
    payloadHash: hash,
    args: request.args,
    leaseMs,
    actor: 'runtime',
    runId: request.runId,
    traceId: request.traceId,
    toolCallId: request.toolCallId,
  })
  if (claim.kind !== 'claimed') return answerFor<R>(machine.db, claim)
  const held: Held = { op: claim.op, leaseToken: claim.leaseToken, actor: 'runtime' }
  return leaseGuarded(machine, held, () => run(machine, tool, request, held, claim.approved, 0))
}

/** A fresh claim's attempt 1, committed in flight with it: call it, then follow the decision table. */
async function runFirstAttempt<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  request: InvokeRequest<A>,
  held: Held,
): Promise<InvokeOutcome<R>> {
  const outcome = await callAndRecord(machine, tool, request, held, {
    attempt: 1,
    attemptKey: held.op.operationKey,
  })
  return outcome ?? (await run(machine, tool, request, held, false, 1))
}

/** Our lease ran out and another caller took the operation over: it decides now. */
async function leaseGuarded<R>(
  machine: Machine,
  held: Held,
  work: () => Promise<InvokeOutcome<R>>,
): Promise<InvokeOutcome<R>> {
  try {
    return await work()
  } catch (error) {
    if (error instanceof LeaseLostError) {
      machine.logger.warn({ operationKey: held.op.operationKey }, error.message)
      return { kind: 'retry_later', operationId: held.op.id, retryAfterMs: 1000 }
    }
    throw error
  }
}

/** A compensable tool's undo reference: committed with its attempt, before the call goes out. */
function undoRefFor(tool: Pick<Tool<never, unknown>, 'effect' | 'name'>) {
  return tool.effect === 'compensable' ? (key: string) => ({ tool: tool.name, key }) : undefined
}

async function run<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  request: InvokeRequest<A>,
  held: Held,
  approvedAtClaim: boolean,
  /** Attempts this invoke already made (the first one, when the claim started it). */
  executedAlready: number,
): Promise<InvokeOutcome<R>> {
  // A human's retry approves exactly the first step taken on it.
  let approved = approvedAtClaim
  let executedHere = executedAlready
  for (let steps = 0; steps < MAX_STEPS; steps += 1) {
    const { step, last } = await nextStep(machine, held, approved)
    approved = false
    switch (step.kind) {
      case 'execute': {
        if (executedHere > 0) {
          await sleep(backoffDelay(policyOf(machine, tool.name), held.op.roundAttempts))
        }
        executedHere += 1
        const outcome = await executeOnce(machine, tool, request, held, step.closeLast)
        if (outcome !== undefined) return outcome
        continue
      }
      case 'undo': {
        if (last === undefined) throw new Error('undo step without an attempt')
        const outcome = await undoOnce(machine, tool, request.args, held, last, step.closeLast !== null)
        if (outcome !== undefined) return outcome
        continue
      }
      default:
        return settleStep(machine, held, step, last)
    }
  }
  throw new Error(`operation '${held.op.operationKey}' did not settle within ${MAX_STEPS} steps`)
}

/** One attempt: committed in flight, called, recorded. Undefined after an unknown outcome. */
async function executeOnce<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  request: InvokeRequest<A>,
  held: Held,
  closeLast: 'unknown' | 'not_sent' | null,
): Promise<InvokeOutcome<R> | undefined> {
  const started = await startAttempt(machine.db, held, {
    leaseMs: toolLeaseMs(machine.settings, tool as Tool<never, unknown>),
    closeLast,
    // Committed with the in-flight attempt, before the call: the undo of a lost response is known
    // before there is anything to undo.
    undoRefFor: undoRefFor(tool),
  })
  return callAndRecord(machine, tool, request, held, started)
}

/** Calls the tool for an attempt already committed in flight, and records what it did. */
async function callAndRecord<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  request: InvokeRequest<A>,
  held: Held,
  started: { attempt: number; attemptKey: string },
): Promise<InvokeOutcome<R> | undefined> {
  const { db } = machine
  machine.failpoints.hit('outbound.before_execute')
  const result = await callExecute(tool, request.args, {
    key: started.attemptKey,
    operationKey: held.op.operationKey,
    attempt: started.attempt,
    allowHosts: machine.settings.allowHosts,
  })
  // Crash test: the effect has landed downstream, nothing of it is recorded yet.
  machine.failpoints.hit('outbound.after_execute')
  switch (result.kind) {
    case 'success': {
      const op = await recordSuccess(db, held, started.attempt, result)
      return {
        kind: 'completed',
        operationId: op.id,
        result: result.result,
        downstreamId: op.downstreamId,
        replayed: false,
      }
    }
    case 'rejection': {
      const op = await recordRejection(db, held, started.attempt, result.error, result.details)
      const details = result.details ?? null
      return { kind: 'failed', operationId: op.id, reason: 'rejected', error: result.error, details }
    }
    case 'unknown':
      await recordUnknown(db, held, started.attempt, result.error, result.details)
      machine.logger.warn(
        { operationKey: held.op.operationKey, attempt: started.attempt, error: result.error },
        'tool outcome unknown',
      )
      // The provider's event may have come before its answer was lost: then it says what happened.
      return settleHeldFromEvidence(db, held)
    default:
      return assertNever(result)
  }
}

/** Runs the recorded undo of `last`. Undefined once it committed: the table decides what follows. */
async function undoOnce<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  args: A,
  held: Held,
  last: AttemptRow,
  closeLast: boolean,
): Promise<InvokeOutcome<R> | undefined> {
  const { db } = machine
  await startUndo(db, held, last, toolLeaseMs(machine.settings, tool as Tool<never, unknown>), closeLast)
  const undone = await callUndo(tool, args, {
    key: last.attemptKey,
    operationKey: held.op.operationKey,
    attempt: last.attempt,
    undoRef: last.undoRef,
  })
  if (undone.kind === 'success') {
    await recordUndoSuccess(db, held, last.attempt, undone.details)
    return undefined
  }
  await recordUndoFailure(db, held, last.attempt, undone.error, undone.details)
  return toReconciliation(machine, held, 'undo_failed', undefined)
}
