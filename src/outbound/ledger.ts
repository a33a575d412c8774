import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { and, eq, isNull, lt, or, sql } from 'drizzle-orm'
import type { Database } from '../db/client.js'
import { operations } from '../db/outbound-schema.js'
import { type Failpoints, noFailpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import { escalate, findPendingApprovalId } from './approvals.js'
import { createOperationBatches } from './batch.js'
import { assertNever, decide } from './decision.js'
import { payloadHash } from './hash.js'
import { MAX_KEY_LENGTH } from './keys.js'
import type { InvokeOutcome } from './outcomes.js'
import { defaultOutboundSettings, type OutboundSettings } from './settings.js'
import {
  type Claim,
  claimOperation,
  findOperation,
  type Held,
  LeaseLostError,
  latestAttempt,
  listAttempts,
  type OperationRow,
  startAttempt,
  transition,
} from './store.js'
import type { ExecuteResult, OperationView, RetryPolicy, Tool, ToolContext, UndoResult } from './tools.js'

export interface InvokeRequest<A> {
  /** From `stepKey(...)` or `ctx.invoke`: the runtime's key, never one a model made up. */
  key: string
  args: A
  /** Observability only: stored, never used to decide whether the effect already happened. */
  runId?: string
  traceId?: string
  toolCallId?: string
}

/** Hands an operation id to reconciliation after a delay (a BullMQ job in the service). */
export interface ReconcileScheduler {
  schedule(operationId: string, attempt: number, delayMs: number): Promise<void>
}

export const noReconcileScheduler: ReconcileScheduler = { schedule: async () => {} }

export interface OutboundLedgerOptions {
  db: Database
  logger: Logger
  settings?: OutboundSettings
  scheduler?: ReconcileScheduler
  failpoints?: Failpoints
  /** Tools reconciliation and compensation can find by name after a restart. */
  tools?: readonly Tool<never, unknown>[]
}

export type CompensateOutcome =
  | { kind: 'compensated'; operationId: string; replayed: boolean }
  | { kind: 'not_completed'; status: OperationRow['status'] | 'missing' }
  | { kind: 'not_compensable' }
  | { kind: 'retry_later' }
  | { kind: 'escalated'; operationId: string; approvalId: string }

export interface OutboundLedger {
  invoke<A, R>(tool: Tool<A, R>, request: InvokeRequest<A>): Promise<InvokeOutcome<R>>
  /** Runs the recorded undo of a completed compensable operation (a saga abort). */
  compensate<A, R>(tool: Tool<A, R>, key: string): Promise<CompensateOutcome>
  register(tool: Tool<never, unknown>): void
  tool(name: string): Tool<never, unknown> | undefined
  readonly settings: OutboundSettings
  readonly db: Database
  /** Shared with the agents' HTTP protocol, so both sides of the guard settle operations alike. */
  moveToReconciliation(
    held: Held,
    reason: string,
    attempt?: { attempt: number },
  ): Promise<{ operationId: string }>
  moveToExhausted(
    held: Held,
    last: { attempt: number; details?: unknown } | undefined,
    closeLast: boolean,
  ): Promise<InvokeOutcome<never>>
  moveToUndoneFailure(held: Held, reason: string): Promise<InvokeOutcome<never>>
  /** The guard's answer for an operation the caller could not lease. */
  answerFor<R>(claim: Exclude<Claim, { kind: 'claimed' }>): Promise<InvokeOutcome<R>>
  retryPolicy(tool: { retry?: Partial<RetryPolicy> | undefined }): RetryPolicy
}

const DEFAULT_TIMEOUT_MS = 30_000
// Each step of the loop below starts an attempt or settles one, and rounds are capped, so this only
// guards against a bug turning the decision table into a loop.
const MAX_STEPS = 64

class AttemptTimeoutError extends Error {}

type StartedAttempt = { attempt: number; attemptKey: string }

/** A compensable tool's undo reference for an attempt key: committed with the attempt, before the call. */
function undoRefFor(tool: Pick<Tool<never, unknown>, 'effect' | 'name'>) {
  return tool.effect === 'compensable' ? (key: string) => ({ tool: tool.name, key }) : undefined
}

/** The in-process guard: `invoke` enforces the decision table for a tool's effect class. */
export function createOutboundLedger(options: OutboundLedgerOptions): OutboundLedger {
  const { db, logger } = options
  const settings = options.settings ?? defaultOutboundSettings
  const scheduler = options.scheduler ?? noReconcileScheduler
  const failpoints = options.failpoints ?? noFailpoints
  const registry = new Map<string, Tool<never, unknown>>()
  const batches = createOperationBatches(db.$client)

  const register = (tool: Tool<never, unknown>) => {
    const known = registry.get(tool.name)
    if (known !== undefined && known !== tool && known.effect !== tool.effect) {
      throw new TypeError(`tool '${tool.name}' is already registered with effect ${known.effect}`)
    }
    registry.set(tool.name, tool)
  }
  for (const tool of options.tools ?? []) register(tool)

  const policyOf = (tool: Pick<Tool<never, unknown>, 'retry'>): RetryPolicy => ({
    attempts: tool.retry?.attempts ?? settings.maxAttempts,
    baseDelayMs: tool.retry?.baseDelayMs ?? settings.backoffBaseMs,
    maxDelayMs: tool.retry?.maxDelayMs ?? settings.backoffMaxMs,
  })
  const leaseMsOf = (tool: Tool<never, unknown>) =>
    Math.max(settings.leaseMs, (tool.timeoutMs ?? DEFAULT_TIMEOUT_MS) + 5_000)

  const toReconciliation = async (held: Held, reason: string, attempt?: { attempt: number }) => {
    const op = await transition(db, held, {
      set: {
        status: 'needs_reconciliation',
        leaseToken: null,
        leaseUntil: null,
        reconcileAt: sql`now() + ${`${settings.reconcileDelayMs} milliseconds`}::interval`,
      },
      event: 'needs_reconciliation',
      details: { reason },
      ...(attempt === undefined ? {} : { attempt: { attempt: attempt.attempt, status: 'unknown' as const } }),
    })
    await scheduler.schedule(op.id, op.attempts, settings.reconcileDelayMs).catch((error: unknown) => {
      // The row says reconciliation is due; the reconciler's sweep enqueues it once Redis answers.
      logger.warn({ err: error, operationId: op.id }, 'could not schedule reconciliation; the sweep will')
    })
    return { kind: 'needs_reconciliation', operationId: op.id, reason } as const
  }
  /**
   * An idempotent round used up. `last` is the latest attempt (its details are the answer's); when
   * `closeLast` is set, that attempt is closed as unknown.
   */
  const toExhausted = async (
    held: Held,
    last: { attempt: number; details?: unknown } | undefined,
    closeLast: boolean,
  ): Promise<InvokeOutcome<never>> => {
    const closing = closeLast ? last : undefined
    const op = await transition(db, held, {
      set: { status: 'exhausted', leaseToken: null, leaseUntil: null },
      event: 'retries_exhausted',
      details: { roundAttempts: held.op.roundAttempts },
      ...(closing === undefined ? {} : { attempt: { attempt: closing.attempt, status: 'unknown' as const } }),
    })
    return {
      kind: 'exhausted',
      operationId: op.id,
      attempts: op.roundAttempts,
      error: op.lastError ?? 'unknown outcome',
      details: last?.details ?? null,
    }
  }

  /** The undo ran and committed, and the table allows no retry: definitely did not happen. */
  const toUndoneFailure = async (held: Held, reason: string): Promise<InvokeOutcome<never>> => {
    const op = await transition(db, held, {
      set: { status: 'failed', lastError: reason, leaseToken: null, leaseUntil: null },
      event: 'failed',
      details: { reason },
    })
    return { kind: 'failed', operationId: op.id, reason: 'undone', error: reason, details: null }
  }

  /** The guard's answer for an operation this caller could not lease. */
  const settled = async <R>(claim: Exclude<Claim, { kind: 'claimed' }>): Promise<InvokeOutcome<R>> => {
    const { op } = claim
    switch (claim.kind) {
      case 'completed':
        return {
          kind: 'completed',
          operationId: op.id,
          result: op.resultJson as R,
          downstreamId: op.downstreamId,
          replayed: true,
        }
      case 'retry_later':
        return {
          kind: 'retry_later',
          operationId: op.id,
          retryAfterMs: Math.max(0, claim.leaseUntil.getTime() - Date.now()),
        }
      case 'payload_conflict':
        return {
          kind: 'payload_conflict',
          operationId: op.id,
          message: `operation key '${op.operationKey}' was used with other arguments (or another tool); the original is kept`,
        }
      case 'needs_reconciliation':
        return { kind: 'needs_reconciliation', operationId: op.id, reason: op.lastError ?? 'unknown_outcome' }
      case 'awaiting_approval':
        return {
          kind: 'awaiting_approval',
          operationId: op.id,
          approvalId: await findPendingApprovalId(db, op.id),
        }
      case 'failed':
      case 'compensated': {
        const last = await latestAttempt(db, op.id)
        return {
          kind: 'failed',
          operationId: op.id,
          reason:
            claim.kind === 'compensated'
              ? 'compensated'
              : last?.status === 'compensated'
                ? 'undone'
                : 'rejected',
          error: op.lastError ?? claim.kind,
          details: last?.details ?? null,
        }
      }
      case 'abandoned':
        return { kind: 'abandoned', operationId: op.id }
      default:
        return assertNever(claim)
    }
  }

  /**
   * Records what one attempt did. Success takes the batched transition (one statement for every
   * concurrent invoke); `undefined` means the outcome is unknown and the table decides what follows.
   */
  const settleAttempt = async <R>(
    held: Held,
    started: { attempt: number },
    result: ExecuteResult<R>,
  ): Promise<InvokeOutcome<R> | undefined> => {
    switch (result.kind) {
      case 'success': {
        const downstreamId = result.downstreamId ?? null
        const completed = await batches.complete.run({
          operationId: held.op.id,
          leaseToken: held.leaseToken,
          attempt: started.attempt,
          resultJson: JSON.stringify(result.result ?? null),
          downstreamId,
          actor: held.actor,
        })
        if (!completed) throw new LeaseLostError(held.op.operationKey)
        return {
          kind: 'completed',
          operationId: held.op.id,
          result: result.result,
          downstreamId,
          replayed: false,
        }
      }
      case 'rejection': {
        const op = await transition(db, held, {
          set: { status: 'failed', lastError: result.error, leaseToken: null, leaseUntil: null },
          event: 'rejected',
          details: { attempt: started.attempt },
          attempt: {
            attempt: started.attempt,
            status: 'rejected',
            error: result.error,
            details: result.details ?? null,
          },
        })
        return {
          kind: 'failed',
          operationId: op.id,
          reason: 'rejected',
          error: result.error,
          details: result.details ?? null,
        }
      }
      case 'unknown':
        await transition(db, held, {
          set: { lastError: result.error },
          event: 'outcome_unknown',
          details: { attempt: started.attempt, error: result.error },
          attempt: {
            attempt: started.attempt,
            status: 'unknown',
            error: result.error,
            details: result.details ?? null,
          },
        })
        logger.warn(
          { operationKey: held.op.operationKey, attempt: started.attempt, error: result.error },
          'tool outcome unknown',
        )
        return undefined
      default:
        return assertNever(result)
    }
  }

  const execute = async <A, R>(tool: Tool<A, R>, args: A, operationKey: string, started: StartedAttempt) => {
    failpoints.hit('outbound.before_execute')
    const result = await callExecute(tool, args, {
      key: started.attemptKey,
      operationKey,
      attempt: started.attempt,
      allowHosts: settings.allowHosts,
    })
    // Crash test: the effect has landed downstream, nothing of it is recorded yet.
    failpoints.hit('outbound.after_execute')
    return result
  }

  const run = async <A, R>(
    tool: Tool<A, R>,
    args: A,
    held: Held,
    approvedAtClaim: boolean,
    /** An attempt already executed (the batched first call) whose outcome was not a success. */
    executed?: { started: StartedAttempt; result: ExecuteResult<R> },
  ): Promise<InvokeOutcome<R>> => {
    const policy = policyOf(tool as Tool<never, unknown>)
    const leaseMs = leaseMsOf(tool as Tool<never, unknown>)
    let approved = approvedAtClaim
    let executedHere = 0
    let pending = executed
    for (let step = 0; step < MAX_STEPS; step += 1) {
      if (pending !== undefined) {
        const { started, result } = pending
        pending = undefined
        executedHere += 1
        const outcome = await settleAttempt(held, started, result)
        if (outcome !== undefined) return outcome
        continue
      }
      const last = await latestAttempt(db, held.op.id)
      const next = decide({
        effect: tool.effect,
        last: last === undefined ? undefined : { status: last.status, hasUndoRef: last.undoRef !== null },
        roundAttempts: held.op.roundAttempts,
        maxAttempts: policy.attempts,
        approved,
      })
      switch (next.kind) {
        case 'execute': {
          if (executedHere > 0) {
            // Bounded backoff: the base delay doubles after every attempt of this round, up to the cap.
            await sleep(Math.min(policy.baseDelayMs * 2 ** (executedHere - 1), policy.maxDelayMs))
          }
          const started = await startAttempt(db, held, {
            leaseMs,
            closeLast: next.closeLast,
            // Committed with the in-flight attempt, before the call: the undo of a lost response is
            // known before there is anything to undo.
            undoRefFor: undoRefFor(tool),
          })
          approved = false
          pending = { started, result: await execute(tool, args, held.op.operationKey, started) }
          continue
        }
        case 'undo': {
          if (last === undefined || tool.undo === undefined)
            throw new Error('undo step without an attempt or an undo')
          await transition(db, held, {
            set: { leaseUntil: sql`now() + ${`${leaseMs} milliseconds`}::interval` },
            event: 'undo_started',
            details: { attempt: last.attempt, attemptKey: last.attemptKey },
            ...(next.closeLast === null
              ? {}
              : { attempt: { attempt: last.attempt, status: 'unknown' as const } }),
          })
          approved = false
          const undone = await callUndo(tool, args, {
            key: last.attemptKey,
            operationKey: held.op.operationKey,
            attempt: last.attempt,
            undoRef: last.undoRef,
          })
          if (undone.kind === 'success') {
            // Only now, with the undo committed, may the next attempt go out (under a new key).
            await transition(db, held, {
              set: {},
              event: 'compensated',
              details: { attempt: last.attempt },
              attempt: { attempt: last.attempt, status: 'compensated', details: undone.details ?? null },
            })
            continue
          }
          await transition(db, held, {
            set: { lastError: `undo failed: ${undone.error}` },
            event: 'undo_failed',
            details: { attempt: last.attempt, error: undone.error },
            attempt: {
              attempt: last.attempt,
              status: 'undo_failed',
              error: undone.error,
              details: undone.details ?? null,
            },
          })
          return toReconciliation(held, 'undo_failed')
        }
        case 'needs_reconciliation':
          return toReconciliation(
            held,
            next.reason,
            next.closeLast === null || last === undefined ? undefined : last,
          )
        case 'exhausted':
          return toExhausted(held, last, next.closeLast !== null)
        case 'failed':
          return toUndoneFailure(held, next.reason)
        default:
          return assertNever(next)
      }
    }
    throw new Error(`operation '${held.op.operationKey}' did not settle within ${MAX_STEPS} steps`)
  }

  return {
    settings,
    db,
    register,
    moveToReconciliation: toReconciliation,
    moveToExhausted: toExhausted,
    moveToUndoneFailure: toUndoneFailure,
    answerFor: settled,
    retryPolicy: (tool) => policyOf(tool as Tool<never, unknown>),
    tool: (name) => registry.get(name),

    async invoke<A, R>(tool: Tool<A, R>, request: InvokeRequest<A>): Promise<InvokeOutcome<R>> {
      if (request.key.length === 0 || request.key.length > MAX_KEY_LENGTH) {
        throw new TypeError(`operation keys are 1-${MAX_KEY_LENGTH} characters`)
      }
      register(tool as unknown as Tool<never, unknown>)
      const hash = payloadHash(request.args)
      const leaseMs = leaseMsOf(tool as unknown as Tool<never, unknown>)
      const leaseToken = randomUUID()
      let operationId = ''
      try {
        // The common case, batched with concurrent invokes: a key never seen, claimed with its first
        // attempt in flight in one statement. A key seen before takes the one-by-one claim below.
        const fresh = await batches.claimFresh.run({
          key: request.key,
          tool: tool.name,
          effect: tool.effect,
          payloadHash: hash,
          argsJson: JSON.stringify(request.args),
          leaseToken,
          leaseMs,
          actor: 'runtime',
          undoRefJson: tool.effect === 'compensable' ? JSON.stringify(undoRefFor(tool)?.(request.key)) : null,
          runId: request.runId ?? null,
          traceId: request.traceId ?? null,
          toolCallId: request.toolCallId ?? null,
        })
        if (fresh !== undefined) {
          operationId = fresh.id
          const started = { attempt: 1, attemptKey: fresh.operationKey }
          const result = await execute(tool, request.args, fresh.operationKey, started)
          const freshHeld: Held = {
            op: { id: fresh.id, operationKey: fresh.operationKey } as OperationRow,
            leaseToken,
            actor: 'runtime',
          }
          if (result.kind === 'success')
            return (await settleAttempt(freshHeld, started, result)) as InvokeOutcome<R>
          // Anything but a success is settled one by one, with the whole row in hand.
          const op = await findOperation(db, request.key)
          if (op === undefined) throw new LeaseLostError(request.key)
          return await run(tool, request.args, { ...freshHeld, op }, false, { started, result })
        }
        const claim = await claimOperation(db, {
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
        if (claim.kind !== 'claimed') return settled<R>(claim)
        operationId = claim.op.id
        const held: Held = { op: claim.op, leaseToken: claim.leaseToken, actor: 'runtime' }
        return await run(tool, request.args, held, claim.approved)
      } catch (error) {
        if (error instanceof LeaseLostError) {
          // Our lease ran out and another caller took the operation over: it decides now.
          logger.warn({ operationKey: request.key }, error.message)
          return { kind: 'retry_later', operationId, retryAfterMs: 1000 }
        }
        throw error
      }
    },

    async compensate<A, R>(tool: Tool<A, R>, key: string): Promise<CompensateOutcome> {
      if (tool.effect !== 'compensable' || tool.undo === undefined) return { kind: 'not_compensable' }
      const token = randomUUID()
      const leaseMs = leaseMsOf(tool as unknown as Tool<never, unknown>)
      // A completed operation with a live lease is being undone; the lease keeps two aborts apart.
      const [op] = await db
        .update(operations)
        .set({
          leaseToken: token,
          leaseUntil: sql`now() + ${`${leaseMs} milliseconds`}::interval`,
          updatedAt: sql`now()`,
        })
        .where(
          and(
            eq(operations.operationKey, key),
            eq(operations.tool, tool.name),
            eq(operations.status, 'completed'),
            or(isNull(operations.leaseUntil), lt(operations.leaseUntil, sql`now()`)),
          ),
        )
        .returning()
      if (op === undefined) {
        const [current] = await db.select().from(operations).where(eq(operations.operationKey, key))
        if (current === undefined) return { kind: 'not_completed', status: 'missing' }
        if (current.status === 'compensated')
          return { kind: 'compensated', operationId: current.id, replayed: true }
        if (current.status === 'completed') return { kind: 'retry_later' }
        return { kind: 'not_completed', status: current.status }
      }
      const held: Held = { op, leaseToken: token, actor: 'saga' }
      const attempts = await listAttempts(db, op.id)
      const landed = attempts.findLast((attempt) => attempt.status === 'succeeded')
      await transition(db, held, {
        set: {},
        event: 'undo_started',
        details: { attempt: landed?.attempt, reason: 'saga_abort' },
      })
      const undone = await callUndo(tool, op.args as A, {
        key: landed?.attemptKey ?? op.operationKey,
        operationKey: op.operationKey,
        attempt: landed?.attempt ?? op.attempts,
        undoRef: landed?.undoRef ?? op.undoRef,
      })
      if (undone.kind === 'success') {
        await transition(db, held, {
          set: { status: 'compensated', leaseToken: null, leaseUntil: null },
          event: 'compensated',
          details: { reason: 'saga_abort' },
        })
        return { kind: 'compensated', operationId: op.id, replayed: false }
      }
      // A failing compensation stops the abort: skipping ahead would unwind around a step still in place.
      const { approvalId } = await escalate(db, held, {
        action: 'undo',
        reason: 'compensation_failed',
        evidence: { error: undone.error, details: undone.details ?? null },
        proposedAction: 'investigate',
      })
      return { kind: 'escalated', operationId: op.id, approvalId }
    },
  }
}

/** The operation as a tool's `reconcile` sees it. */
export async function operationView<A>(db: Database, op: OperationRow): Promise<OperationView<A>> {
  const attempts = await listAttempts(db, op.id)
  return {
    id: op.id,
    key: op.operationKey,
    tool: op.tool,
    effect: op.effectClass,
    args: op.args as A,
    payloadHash: op.payloadHash,
    status: op.status,
    attempts: op.attempts,
    attemptKeys: attempts.map((a) => a.attemptKey),
    downstreamId: op.downstreamId,
    undoRef: op.undoRef,
    lastError: op.lastError,
  }
}

/** Runs one attempt; anything but a returned success or rejection is an unknown outcome. */
async function callExecute<A, R>(
  tool: Tool<A, R>,
  args: A,
  ctx: Omit<ToolContext, 'signal'>,
): Promise<ExecuteResult<R>> {
  try {
    return await withTimeout(tool.timeoutMs ?? DEFAULT_TIMEOUT_MS, (signal) =>
      tool.execute(args, { ...ctx, signal }),
    )
  } catch (error) {
    // A throw may come after the request left (a reset, a timeout): never read it as "did not happen".
    return { kind: 'unknown', error: describe(error) }
  }
}

async function callUndo<A, R>(
  tool: Tool<A, R>,
  args: A,
  ctx: Omit<ToolContext, 'signal' | 'allowHosts'> & { undoRef: unknown },
): Promise<UndoResult> {
  const undo = tool.undo
  if (undo === undefined) return { kind: 'failure', error: 'the tool has no undo' }
  try {
    return await withTimeout(tool.timeoutMs ?? DEFAULT_TIMEOUT_MS, (signal) =>
      undo(args, { ...ctx, allowHosts: [], signal }),
    )
  } catch (error) {
    return { kind: 'failure', error: describe(error) }
  }
}

export async function withTimeout<T>(ms: number, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController()
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort()
      reject(new AttemptTimeoutError(`no answer within ${ms} ms`))
    }, ms)
  })
  try {
    return await Promise.race([run(controller.signal), timeout])
  } finally {
    clearTimeout(timer)
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : ''
    return `${error.message}${cause}`.slice(0, 2000)
  }
  return String(error).slice(0, 2000)
}
