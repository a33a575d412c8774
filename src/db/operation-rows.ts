import type {
  AttemptStatus,
  EffectClass,
  OperationStatus,
  operationAttempts,
  operations,
} from './outbound-schema.js'

export type { AttemptStatus, EffectClass, OperationStatus }
export type OperationRow = typeof operations.$inferSelect
export type AttemptRow = typeof operationAttempts.$inferSelect

type Raw = Record<string, unknown>

/** An operation this caller leases: `op` is kept in step with the row by every transition. */
export interface Held {
  op: OperationRow
  leaseToken: string
  actor: string
}

/** JSON for a `::text::jsonb` parameter: undefined and null are SQL NULL, as drizzle wrote them. */
export const json = (value: unknown): string | null =>
  value === undefined || value === null ? null : JSON.stringify(value)

/**
 * The idempotency key one attempt sends downstream. Retries of idempotent and irreversible tools reuse
 * the operation key (a receiver that honors keys turns the repeat into a no-op); a compensable tool's
 * attempt after a committed undo is a new intended action, so it gets a new key.
 */
export function attemptKey(operationKey: string, attempt: number, fresh: boolean): string {
  return fresh && attempt > 1 ? `${operationKey}#${attempt}` : operationKey
}

// Through the client drizzle shares, timestamps arrive as text; through a plain client as Dates.
const date = (value: unknown): Date => new Date(value as string | Date)
const dateOrNull = (value: unknown): Date | null =>
  value === null || value === undefined ? null : date(value)
const text = (value: unknown): string | null => (value === null || value === undefined ? null : String(value))

/** A raw `operations` row (snake_case, as `returning *` gives it) as the rest of the code sees it. */
export function toOperation(row: Raw): OperationRow {
  return {
    id: String(row.id),
    operationKey: String(row.operation_key),
    tool: String(row.tool),
    effectClass: row.effect_class as EffectClass,
    payloadHash: String(row.payload_hash),
    args: row.args,
    status: row.status as OperationStatus,
    leaseToken: text(row.lease_token),
    leaseUntil: dateOrNull(row.lease_until),
    attempts: Number(row.attempts),
    roundAttempts: Number(row.round_attempts),
    resultJson: row.result_json ?? null,
    downstreamId: text(row.downstream_id),
    undoRef: row.undo_ref ?? null,
    lastError: text(row.last_error),
    evidence: row.evidence ?? null,
    reconcileAt: dateOrNull(row.reconcile_at),
    runId: text(row.run_id),
    traceId: text(row.trace_id),
    toolCallId: text(row.tool_call_id),
    createdAt: date(row.created_at),
    updatedAt: date(row.updated_at),
    completedAt: dateOrNull(row.completed_at),
  }
}

export function toAttempt(row: Raw): AttemptRow {
  return {
    id: Number(row.id),
    operationId: String(row.operation_id),
    attempt: Number(row.attempt),
    attemptKey: String(row.attempt_key),
    status: row.status as AttemptStatus,
    undoRef: row.undo_ref ?? null,
    error: text(row.error),
    details: row.details ?? null,
    startedAt: date(row.started_at),
    finishedAt: dateOrNull(row.finished_at),
  }
}
