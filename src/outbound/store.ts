import { randomUUID } from 'node:crypto'
import { and, asc, desc, eq, getTableColumns, sql } from 'drizzle-orm'
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core'
import type { Database, Transaction } from '../db/client.js'
import {
  type AttemptStatus,
  type EffectClass,
  type OperationStatus,
  operationAttempts,
  operationAudit,
  operations,
} from '../db/outbound-schema.js'
import { attemptKey } from './keys.js'

export type OperationRow = typeof operations.$inferSelect
export type AttemptRow = typeof operationAttempts.$inferSelect
type Executor = Database | Transaction

export interface ClaimRequest {
  key: string
  tool: string
  effect: EffectClass
  payloadHash: string
  args: unknown
  leaseMs: number
  actor: string
  runId?: string | undefined
  traceId?: string | undefined
  toolCallId?: string | undefined
}

export type Claim =
  /** This caller holds the lease. `approved`: taken on a human's retry decision. */
  | { kind: 'claimed'; op: OperationRow; leaseToken: string; approved: boolean; takeover: boolean }
  | { kind: 'completed'; op: OperationRow }
  | { kind: 'retry_later'; op: OperationRow; leaseUntil: Date }
  | { kind: 'payload_conflict'; op: OperationRow }
  | { kind: 'needs_reconciliation'; op: OperationRow }
  | { kind: 'awaiting_approval'; op: OperationRow }
  | { kind: 'failed'; op: OperationRow }
  | { kind: 'compensated'; op: OperationRow }
  | { kind: 'abandoned'; op: OperationRow }

const CLAIMABLE: readonly OperationStatus[] = ['in_progress', 'retry_approved', 'exhausted']

const interval = (ms: number) => sql`now() + ${`${ms} milliseconds`}::interval`

/**
 * The claim: one INSERT … ON CONFLICT on the unique operation key. A new key is inserted with a
 * lease; an existing one is taken over in the same statement only if it has the same arguments,
 * tool and effect class and is claimable (an expired lease, an approved retry, an exhausted
 * idempotent round). Concurrent callers serialise on the index, so exactly one of them gets the
 * lease; nothing checks first and writes later.
 */
export async function claimOperation(db: Database, request: ClaimRequest): Promise<Claim> {
  for (let round = 0; round < 3; round += 1) {
    const token = randomUUID()
    const claimed = await db.transaction(async (tx) => {
      const [row] = await tx
        .insert(operations)
        .values({
          operationKey: request.key,
          tool: request.tool,
          effectClass: request.effect,
          payloadHash: request.payloadHash,
          args: request.args,
          status: 'in_progress',
          leaseToken: token,
          leaseUntil: interval(request.leaseMs),
          runId: request.runId,
          traceId: request.traceId,
          toolCallId: request.toolCallId,
        })
        .onConflictDoUpdate({
          target: operations.operationKey,
          set: {
            leaseToken: token,
            leaseUntil: interval(request.leaseMs),
            // A new round after an approval or an exhausted round: the cap counts afresh.
            roundAttempts: sql`case when ${operations.status} = 'in_progress' then ${operations.roundAttempts} else 0 end`,
            runId: sql`coalesce(excluded.run_id, ${operations.runId})`,
            traceId: sql`coalesce(excluded.trace_id, ${operations.traceId})`,
            toolCallId: sql`coalesce(excluded.tool_call_id, ${operations.toolCallId})`,
            updatedAt: sql`now()`,
          },
          setWhere: sql`${operations.payloadHash} = excluded.payload_hash
            and ${operations.tool} = excluded.tool
            and ${operations.effectClass} = excluded.effect_class
            and ${operations.status} in ('in_progress', 'retry_approved', 'exhausted')
            and (${operations.leaseUntil} is null or ${operations.leaseUntil} < now())`,
        })
        .returning({ ...getTableColumns(operations), inserted: sql<boolean>`(xmax = 0)` })
      if (row === undefined) return undefined
      const { inserted, ...current } = row
      const previous = current.status
      let op: OperationRow = current
      if (previous !== 'in_progress') {
        const [updated] = await tx
          .update(operations)
          .set({ status: 'in_progress' })
          .where(eq(operations.id, op.id))
          .returning()
        if (updated !== undefined) op = updated
      }
      await audit(tx, op, {
        event: inserted ? 'claimed' : previous === 'in_progress' ? 'lease_taken_over' : 'claimed_again',
        from: inserted ? null : previous,
        to: 'in_progress',
        actor: request.actor,
        details: { runId: request.runId, traceId: request.traceId, toolCallId: request.toolCallId },
      })
      return {
        op,
        approved: previous === 'retry_approved',
        takeover: !inserted && previous === 'in_progress',
      }
    })
    if (claimed !== undefined) return { kind: 'claimed', leaseToken: token, ...claimed }

    const [op] = await db.select().from(operations).where(eq(operations.operationKey, request.key))
    // Deleted between the two statements (retention): claim again.
    if (op === undefined) continue
    if (
      op.payloadHash !== request.payloadHash ||
      op.tool !== request.tool ||
      op.effectClass !== request.effect
    ) {
      return { kind: 'payload_conflict', op }
    }
    switch (op.status) {
      case 'completed':
      case 'needs_reconciliation':
      case 'awaiting_approval':
      case 'failed':
      case 'compensated':
      case 'abandoned':
        return { kind: op.status, op }
      case 'in_progress':
      case 'retry_approved':
      case 'exhausted':
        if (op.leaseUntil !== null) return { kind: 'retry_later', op, leaseUntil: op.leaseUntil }
        // The lease ran out or was released between the two statements: claim again.
        continue
    }
  }
  throw new Error(`operation '${request.key}' kept changing while it was claimed`)
}

export function isClaimable(status: OperationStatus): boolean {
  return CLAIMABLE.includes(status)
}

export interface AuditEntry {
  event: string
  from: OperationStatus | null
  to: OperationStatus | null
  actor: string
  details?: unknown
}

/** Appends one audit row; called in the transaction of the transition it records. */
export async function audit(tx: Executor, op: { id: string; operationKey: string }, entry: AuditEntry) {
  await tx.insert(operationAudit).values({
    operationId: op.id,
    operationKey: op.operationKey,
    event: entry.event,
    fromStatus: entry.from,
    toStatus: entry.to,
    actor: entry.actor,
    details: entry.details ?? null,
  })
}

export class LeaseLostError extends Error {
  constructor(key: string) {
    super(`the lease on operation '${key}' was taken over`)
    this.name = 'LeaseLostError'
  }
}

export interface Held {
  op: OperationRow
  leaseToken: string
  actor: string
}

/**
 * Changes a leased operation, guarded by the lease token, and audits it in the same transaction.
 * Throws LeaseLostError when another caller took the lease over: it then owns the decision.
 */
export async function transition(
  db: Database,
  held: Held,
  change: {
    set: PgUpdateSetSource<typeof operations>
    event: string
    details?: unknown
    attempt?: AttemptChange
  },
): Promise<OperationRow> {
  return db.transaction(async (tx) => {
    const [op] = await tx
      .update(operations)
      .set({ ...change.set, updatedAt: sql`now()` })
      .where(and(eq(operations.id, held.op.id), eq(operations.leaseToken, held.leaseToken)))
      .returning()
    if (op === undefined) throw new LeaseLostError(held.op.operationKey)
    if (change.attempt !== undefined) await changeAttempt(tx, op.id, change.attempt)
    await audit(tx, op, {
      event: change.event,
      from: held.op.status,
      to: op.status,
      actor: held.actor,
      details: change.details,
    })
    held.op = op
    return op
  })
}

export interface AttemptChange {
  attempt: number
  status: AttemptStatus
  error?: string | null
  details?: unknown
  finished?: boolean
}

async function changeAttempt(tx: Transaction, operationId: string, change: AttemptChange) {
  await tx
    .update(operationAttempts)
    .set({
      status: change.status,
      ...(change.error === undefined ? {} : { error: change.error }),
      ...(change.details === undefined ? {} : { details: change.details }),
      ...(change.finished === false ? {} : { finishedAt: sql`now()` }),
    })
    .where(and(eq(operationAttempts.operationId, operationId), eq(operationAttempts.attempt, change.attempt)))
}

/**
 * Starts one attempt: the in-flight row, the undo reference (compensable) and a fresh lease commit
 * together, before anything is sent. A crash after this commit leaves the attempt in flight, which
 * the decision table reads as "may have landed".
 */
export async function startAttempt(
  db: Database,
  held: Held,
  options: {
    leaseMs: number
    closeLast: 'unknown' | 'not_sent' | null
    undoRefFor?: ((key: string) => unknown) | undefined
  },
): Promise<{ attempt: number; attemptKey: string; leaseUntil: Date }> {
  return db.transaction(async (tx) => {
    if (options.closeLast !== null) {
      await tx
        .update(operationAttempts)
        .set({ status: options.closeLast, finishedAt: sql`now()` })
        .where(and(eq(operationAttempts.operationId, held.op.id), eq(operationAttempts.status, 'in_flight')))
    }
    const [op] = await tx
      .update(operations)
      .set({
        attempts: sql`${operations.attempts} + 1`,
        roundAttempts: sql`${operations.roundAttempts} + 1`,
        leaseUntil: interval(options.leaseMs),
        updatedAt: sql`now()`,
      })
      .where(and(eq(operations.id, held.op.id), eq(operations.leaseToken, held.leaseToken)))
      .returning()
    if (op === undefined) throw new LeaseLostError(held.op.operationKey)
    const key = attemptKey(op.operationKey, op.attempts, op.effectClass === 'compensable')
    const undoRef = options.undoRefFor?.(key) ?? null
    await tx
      .insert(operationAttempts)
      .values({ operationId: op.id, attempt: op.attempts, attemptKey: key, undoRef })
    const [withRef] =
      undoRef === null
        ? [op]
        : await tx.update(operations).set({ undoRef }).where(eq(operations.id, op.id)).returning()
    await audit(tx, op, {
      event: 'attempt_started',
      from: held.op.status,
      to: op.status,
      actor: held.actor,
      details: { attempt: op.attempts, attemptKey: key, undoRef },
    })
    held.op = withRef ?? op
    return { attempt: op.attempts, attemptKey: key, leaseUntil: op.leaseUntil ?? new Date() }
  })
}

/** Records the undo reference of an attempt in flight (agents over HTTP do this before their call). */
export async function recordUndoRef(
  db: Database,
  held: Held,
  attempt: number,
  undoRef: unknown,
): Promise<boolean> {
  return db.transaction(async (tx) => {
    const updated = await tx
      .update(operationAttempts)
      .set({ undoRef })
      .where(
        and(
          eq(operationAttempts.operationId, held.op.id),
          eq(operationAttempts.attempt, attempt),
          eq(operationAttempts.status, 'in_flight'),
        ),
      )
      .returning({ id: operationAttempts.id })
    if (updated.length === 0) return false
    const [op] = await tx
      .update(operations)
      .set({ undoRef, updatedAt: sql`now()` })
      .where(and(eq(operations.id, held.op.id), eq(operations.leaseToken, held.leaseToken)))
      .returning()
    if (op === undefined) throw new LeaseLostError(held.op.operationKey)
    await audit(tx, op, {
      event: 'undo_ref_recorded',
      from: op.status,
      to: op.status,
      actor: held.actor,
      details: { attempt, undoRef },
    })
    held.op = op
    return true
  })
}

export async function latestAttempt(db: Executor, operationId: string): Promise<AttemptRow | undefined> {
  const [row] = await db
    .select()
    .from(operationAttempts)
    .where(eq(operationAttempts.operationId, operationId))
    .orderBy(desc(operationAttempts.attempt))
    .limit(1)
  return row
}

export async function listAttempts(db: Executor, operationId: string): Promise<AttemptRow[]> {
  return db
    .select()
    .from(operationAttempts)
    .where(eq(operationAttempts.operationId, operationId))
    .orderBy(asc(operationAttempts.attempt))
}

export async function findOperation(db: Executor, key: string): Promise<OperationRow | undefined> {
  const [row] = await db.select().from(operations).where(eq(operations.operationKey, key))
  return row
}

/**
 * The operations of one workflow (an event's handler steps), by their key prefix. The prefix's '%'
 * and '_' are escaped: the encoded parts contain '%', which LIKE would read as a wildcard.
 */
export async function listOperationsByKeyPrefix(db: Executor, prefix: string): Promise<OperationRow[]> {
  const pattern = `${prefix.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`
  return db
    .select()
    .from(operations)
    .where(sql`${operations.operationKey} like ${pattern}`)
    .orderBy(asc(operations.createdAt))
}

export async function listAudit(db: Executor, operationId: string) {
  return db
    .select()
    .from(operationAudit)
    .where(eq(operationAudit.operationId, operationId))
    .orderBy(asc(operationAudit.id))
}
