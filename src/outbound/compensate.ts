import { randomUUID } from 'node:crypto'
import { findOperation, listAttempts } from '../db/operation-queries.js'
import type { Held, OperationRow } from '../db/operation-rows.js'
import { escalate, leaseIn, recordCompensated, startCompensation } from '../db/operations.js'
import { callUndo } from './calls.js'
import { type Machine, toolLeaseMs } from './machine.js'
import type { Tool } from './tools.js'

export type CompensateOutcome =
  | { kind: 'compensated'; operationId: string; replayed: boolean }
  | { kind: 'not_completed'; status: OperationRow['status'] | 'missing' }
  | { kind: 'not_compensable' }
  | { kind: 'retry_later' }
  | { kind: 'escalated'; operationId: string; approvalId: string }

/** Runs the recorded undo of a completed compensable operation (a saga abort). */
export async function compensate<A, R>(
  machine: Machine,
  tool: Tool<A, R>,
  key: string,
): Promise<CompensateOutcome> {
  if (tool.effect !== 'compensable' || tool.undo === undefined) return { kind: 'not_compensable' }
  const { db } = machine
  const token = randomUUID()
  const leaseMs = toolLeaseMs(machine.settings, tool as Tool<never, unknown>)
  // A completed operation with a live lease is being undone; the lease keeps two aborts apart.
  const op = await leaseIn(db, { key, tool: tool.name }, 'completed', token, leaseMs)
  if (op === undefined) {
    const current = await findOperation(db, key)
    if (current === undefined) return { kind: 'not_completed', status: 'missing' }
    if (current.status === 'compensated')
      return { kind: 'compensated', operationId: current.id, replayed: true }
    if (current.status === 'completed') return { kind: 'retry_later' }
    return { kind: 'not_completed', status: current.status }
  }
  const held: Held = { op, leaseToken: token, actor: 'saga' }
  const attempts = await listAttempts(db, op.id)
  const landed = attempts.findLast((attempt) => attempt.status === 'succeeded')
  await startCompensation(db, held, landed?.attempt)
  const undone = await callUndo(tool, op.args as A, {
    key: landed?.attemptKey ?? op.operationKey,
    operationKey: op.operationKey,
    attempt: landed?.attempt ?? op.attempts,
    undoRef: landed?.undoRef ?? op.undoRef,
  })
  if (undone.kind === 'success') {
    await recordCompensated(db, held)
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
}
