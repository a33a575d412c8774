import { randomUUID } from 'node:crypto'
import type { Database } from '../db/client.js'
import { keysWithPendingEvidence } from '../db/evidence.js'
import { LeaseLostError } from '../db/lease.js'
import { dueForReconciliation, findOperationById, listAttempts } from '../db/operation-queries.js'
import type { Held, OperationRow } from '../db/operation-rows.js'
import { escalate, leaseIn, recordReconciledFound } from '../db/operations.js'
import { DEFAULT_STUCK_AFTER_MS, watchPass, withAbortDeadline } from '../deadline.js'
import type { Logger } from '../logger.js'
import type { JobQueue, QueueBackend } from '../queue/backend.js'
import {
  RECONCILE_OPERATION,
  RECONCILE_QUEUE,
  type ReconcileJobData,
  reconcileJobData,
  reconcileJobId,
} from '../queue/jobs.js'
import { settleFromEvidence } from './evidence.js'
import { machineOf, type OutboundLedger } from './ledger.js'
import type { ReconcileScheduler } from './machine.js'
import type { OperationView, ReconcileResult } from './tools.js'

export function reconcileScheduler(queue: JobQueue<ReconcileJobData>): ReconcileScheduler {
  return {
    async schedule(operationId, attempt, delayMs) {
      await queue.add(
        RECONCILE_OPERATION,
        { operationId },
        { jobId: reconcileJobId(operationId, attempt), delay: delayMs },
      )
    },
  }
}

export type ReconcileOutcome =
  | { kind: 'recorded_success' }
  | { kind: 'escalated'; approvalId: string; reason: string }
  | { kind: 'skipped'; reason: string }
  /** An inbound event had already said what happened (evidence rules): nothing was asked. */
  | { kind: 'settled_by_event'; status: string }

/**
 * Sleep, reconcile, then escalate: asks the tool's `reconcile` whether the operation happened. Found
 * records success with the evidence and runs nothing; not found, cannot tell, or no `reconcile` at
 * all hands it to a human. Nothing here ever executes the tool.
 */
export async function reconcileOperation(
  deps: { db: Database; ledger: OutboundLedger; logger: Logger },
  operationId: string,
): Promise<ReconcileOutcome> {
  const { db } = deps
  const timeoutMs = deps.ledger.settings.reconcileTimeoutMs
  const waiting = await findOperationById(db, operationId)
  if (waiting === undefined) return { kind: 'skipped', reason: 'no such operation' }
  const settled = await settleFromEvidence(db, { key: waiting.operationKey })
  if (settled !== undefined) return { kind: 'settled_by_event', status: settled.status }
  try {
    return await askAndEscalate(deps, operationId, timeoutMs)
  } catch (error) {
    // An event settled it while the tool was being asked: its lease went with the settlement.
    if (error instanceof LeaseLostError) return { kind: 'skipped', reason: 'settled meanwhile' }
    throw error
  }
}

async function askAndEscalate(
  deps: { db: Database; ledger: OutboundLedger; logger: Logger },
  operationId: string,
  timeoutMs: number,
): Promise<ReconcileOutcome> {
  const { db } = deps
  const token = randomUUID()
  // The reconciler leases the row too, so two reconcilers (a job and a sweep) never both decide.
  const op = await leaseIn(db, { id: operationId }, 'needs_reconciliation', token, timeoutMs + 5000)
  if (op === undefined) return { kind: 'skipped', reason: 'not waiting for reconciliation' }
  const held: Held = { op, leaseToken: token, actor: 'reconciler' }
  const tool = machineOf(deps.ledger).tool(op.tool)
  if (tool?.reconcile === undefined) {
    // What a person reading the approval needs: why nobody could check, and what to do about it.
    const reason = 'unknown_outcome'
    const why =
      tool === undefined
        ? `no tool named '${op.tool}' is registered in this process to ask (an agent's tools never are; an in-process tool is registered through startService({ tools }))`
        : `the tool '${op.tool}' has no reconcile to ask with`
    const { approvalId } = await escalate(db, held, {
      action: 'execute',
      reason,
      evidence: {
        note: `'${op.tool}' was called for '${op.operationKey}' and its outcome is unknown; ${why}. Check the system it acts on, then Record success with what you found, Retry once, or Abandon.`,
      },
      proposedAction: 'investigate',
    })
    return { kind: 'escalated', approvalId, reason }
  }
  const reconcile = tool.reconcile
  const view = await operationView<never>(db, op)
  let result: ReconcileResult
  try {
    result = await withAbortDeadline(timeoutMs, `no answer within ${timeoutMs} ms`, () => reconcile(view))
  } catch (error) {
    result = {
      kind: 'cannot_tell',
      evidence: { error: error instanceof Error ? error.message : String(error) },
    }
  }
  switch (result.kind) {
    case 'found':
      await recordReconciledFound(db, held, result)
      deps.logger.info({ operationKey: op.operationKey }, 'reconciliation found the effect; recorded success')
      return { kind: 'recorded_success' }
    case 'not_found':
    case 'cannot_tell': {
      const reason = result.kind === 'not_found' ? 'reconcile_not_found' : 'reconcile_cannot_tell'
      const { approvalId } = await escalate(db, held, {
        action: 'execute',
        reason,
        evidence: result.evidence ?? null,
        // Not found is evidence that a retry cannot double the effect; cannot tell is not.
        proposedAction: result.kind === 'not_found' ? 'retry' : 'investigate',
      })
      return { kind: 'escalated', approvalId, reason }
    }
    default:
      throw new Error(`reconcile of '${op.tool}' returned ${JSON.stringify(result)}`)
  }
}

export interface Reconciler {
  /** One sweep: enqueues due rows whose job was lost. Exposed for tests. */
  sweep(): Promise<number>
  close(): Promise<void>
}

/** The reconciliation worker plus a sweep that re-enqueues due rows (Redis was down, a job was lost). */
export function startReconciler(deps: {
  backend: QueueBackend
  db: Database
  queue: JobQueue<ReconcileJobData>
  ledger: OutboundLedger
  logger: Logger
  /** A sweep running this long is logged as stuck (every this long until it ends). */
  stuckAfterMs?: number
}): Reconciler {
  const log = deps.logger.child({ component: 'reconciler' })
  const worker = deps.backend.process<ReconcileJobData>(
    RECONCILE_QUEUE,
    async (job) => {
      const { operationId } = reconcileJobData.parse(job.data)
      const outcome = await reconcileOperation({ db: deps.db, ledger: deps.ledger, logger: log }, operationId)
      return { kind: 'done', result: outcome }
    },
    { concurrency: 4, onError: (error) => log.warn({ err: error }, 'reconciler connection error') },
  )
  const scheduler = reconcileScheduler(deps.queue)
  const sweep = async () => {
    const due = await dueForReconciliation(deps.db, 100)
    for (const row of due) await scheduler.schedule(row.id, row.attempts, 0)
    // Evidence a crash left unapplied (the caller died between an unknown outcome and its check).
    for (const key of await keysWithPendingEvidence(deps.db.$client, 100)) {
      await settleFromEvidence(deps.db, { key })
    }
    return due.length
  }
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()
  const loop = () => {
    if (stopped) return
    running = watchPass(sweep(), {
      logger: log,
      loop: 'reconciler',
      stuckAfterMs: deps.stuckAfterMs ?? DEFAULT_STUCK_AFTER_MS,
    })
      .catch((error: unknown) => log.warn({ err: error }, 'reconciliation sweep failed; retrying'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, deps.ledger.settings.sweepIntervalMs)
      })
  }
  timer = setTimeout(loop, deps.ledger.settings.sweepIntervalMs)
  return {
    sweep,
    async close() {
      stopped = true
      clearTimeout(timer)
      await running
      await worker.close()
    },
  }
}

/** The operation as a tool's `reconcile` sees it. */
async function operationView<A>(db: Database, op: OperationRow): Promise<OperationView<A>> {
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
