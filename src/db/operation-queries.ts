import { and, asc, desc, eq, isNull, lt, or, sql } from 'drizzle-orm'
import type postgres from 'postgres'
import { OTHER_LABEL } from '../metrics.js'
import type { Database } from './client.js'
import { evidenceFor } from './evidence.js'
import {
  type AttemptRow,
  type OperationRow,
  type OperationStatus,
  toAttempt,
  toOperation,
} from './operation-rows.js'
import { approvals, operationAudit, operations } from './outbound-schema.js'

// The reads of the outbound ledger. Those on the forward path (the newest attempt, an operation by
// key) are written in SQL like the transitions; the admin's lists use drizzle's builder.

export async function latestAttempt(db: Database, operationId: string): Promise<AttemptRow | undefined> {
  const [row] = await db.$client`
    select * from operation_attempts where operation_id = ${operationId} order by attempt desc limit 1`
  return row === undefined ? undefined : toAttempt(row)
}

export async function listAttempts(db: Database, operationId: string): Promise<AttemptRow[]> {
  const rows = await db.$client`
    select * from operation_attempts where operation_id = ${operationId} order by attempt`
  return rows.map(toAttempt)
}

export async function findOperation(db: Database, key: string): Promise<OperationRow | undefined> {
  const [row] = await db.$client`select * from operations where operation_key = ${key}`
  return row === undefined ? undefined : toOperation(row)
}

export async function findOperationById(db: Database, id: string): Promise<OperationRow | undefined> {
  const [row] = await db.$client`select * from operations where id = ${id}`
  return row === undefined ? undefined : toOperation(row)
}

export async function findPendingApprovalId(db: Database, operationId: string): Promise<string | null> {
  const [row] = await db.$client`
    select id from approvals where operation_id = ${operationId} and status = 'pending'`
  return row === undefined ? null : String(row.id)
}

/** Why the operation went to reconciliation: the code its last `needs_reconciliation` row recorded. */
export async function reconciliationReason(db: Database, operationId: string): Promise<string | null> {
  const [row] = await db.$client`
    select details->>'reason' as reason from operation_audit
    where operation_id = ${operationId} and event = 'needs_reconciliation' order by id desc limit 1`
  return row?.reason ?? null
}

/**
 * The operations of one workflow (an event's handler steps), by their key prefixes (a workflow with a
 * long part has two, see workflowKeyPrefixes). Each prefix's '%' and '_' are escaped: the encoded
 * parts contain '%', which LIKE would read as a wildcard.
 */
export async function listOperationsByKeyPrefix(
  db: Database,
  prefixes: readonly string[],
): Promise<OperationRow[]> {
  const patterns = prefixes.map((prefix) => `${prefix.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`)
  return db
    .select()
    .from(operations)
    .where(or(...patterns.map((pattern) => sql`${operations.operationKey} like ${pattern}`)))
    .orderBy(asc(operations.createdAt))
}

export async function listAudit(db: Database, operationId: string) {
  return db
    .select()
    .from(operationAudit)
    .where(eq(operationAudit.operationId, operationId))
    .orderBy(asc(operationAudit.id))
}

/** Operations by status, newest first (the admin API's list). */
export async function listOperations(
  db: Database,
  filter: { status?: OperationStatus | undefined; limit?: number | undefined } = {},
) {
  return db
    .select({
      id: operations.id,
      key: operations.operationKey,
      tool: operations.tool,
      effect: operations.effectClass,
      status: operations.status,
      attempts: operations.attempts,
      lastError: operations.lastError,
      updatedAt: operations.updatedAt,
    })
    .from(operations)
    .where(filter.status === undefined ? undefined : eq(operations.status, filter.status))
    .orderBy(desc(operations.updatedAt))
    .limit(filter.limit ?? 100)
}

export async function listApprovals(
  db: Database,
  filter: { status?: 'pending' | 'decided' | undefined; limit?: number | undefined } = {},
) {
  return db
    .select({
      id: approvals.id,
      status: approvals.status,
      action: approvals.action,
      reason: approvals.reason,
      proposedAction: approvals.proposedAction,
      decision: approvals.decision,
      createdAt: approvals.createdAt,
      operationKey: operations.operationKey,
      tool: operations.tool,
      effect: operations.effectClass,
    })
    .from(approvals)
    .innerJoin(operations, eq(operations.id, approvals.operationId))
    .where(filter.status === undefined ? undefined : eq(approvals.status, filter.status))
    .orderBy(desc(approvals.createdAt))
    .limit(filter.limit ?? 100)
}

/** One approval with its operation. */
export async function findApproval(db: Database, id: string) {
  const [row] = await db
    .select({ approval: approvals, op: operations })
    .from(approvals)
    .innerJoin(operations, eq(operations.id, approvals.operationId))
    .where(eq(approvals.id, id))
  return row
}

/** Rows due for reconciliation whose job may be lost, with no live reconciler on them. */
export async function dueForReconciliation(db: Database, limit: number) {
  return db
    .select({ id: operations.id, attempts: operations.attempts })
    .from(operations)
    .where(
      and(
        eq(operations.status, 'needs_reconciliation'),
        lt(operations.reconcileAt, sql`now()`),
        or(isNull(operations.leaseUntil), lt(operations.leaseUntil, sql`now()`)),
      ),
    )
    .limit(limit)
}

/** The outbound ledger's figures for /metrics, read on scrape. */
/**
 * Operations still in motion or waiting for someone. The settled ones (completed, compensated,
 * exhausted, failed, abandoned) are most of the table and are not counted on scrape: their total is
 * estimated, so a scrape reads through operations_status_updated_idx only the rows that matter.
 */
export const LIVE_OPERATION_STATUSES = [
  'in_progress',
  'needs_reconciliation',
  'awaiting_approval',
  'retry_approved',
] as const

/**
 * Operations still live (owed a retry, a reconciliation or a decision) and unchanged for longer than
 * `days`, by status: retention never deletes them, so they are reported instead of kept silently.
 */
export async function unsettledPastRetention(
  client: postgres.Sql,
  days: number,
): Promise<Array<{ status: string; n: number }>> {
  return client<Array<{ status: string; n: number }>>`
    select status::text as status, count(*)::int as n from operations
    where status in ${client(LIVE_OPERATION_STATUSES)} and updated_at < now() - ${days} * interval '1 day'
    group by 1 order by 1`
}

export const outboundGaugeReads = (client: postgres.Sql) => ({
  /**
   * Live operations by tool and status, a tool outside `tools` counted as `other`: agents name their
   * tools, so a label per name would grow /metrics without bound (5,000 names: 5,001 series).
   */
  byToolAndStatus: (tools: readonly string[]) =>
    client<Array<{ tool: string; status: string; n: number }>>`
      select case when tool = any(${tools}::text[]) then tool else ${OTHER_LABEL} end as tool,
             status::text as status, count(*)::int as n
      from operations
      where status in ${client(LIVE_OPERATION_STATUSES)} group by 1, 2`,
  pastRetention: (days: number) => unsettledPastRetention(client, days),
  needingReconciliation: async () => {
    const [row] = await client<Array<{ n: number }>>`
      select count(*)::int as n from operations where status = 'needs_reconciliation'`
    return row?.n ?? 0
  },
  pendingApprovals: async () => {
    const [row] = await client<Array<{ n: number }>>`
      select count(*)::int as n from approvals where status = 'pending'`
    return row?.n ?? 0
  },
  oldestPendingApprovalSeconds: async () => {
    const [row] = await client<Array<{ seconds: number }>>`
      select coalesce(extract(epoch from now() - min(created_at))::float8, 0) as seconds
      from approvals where status = 'pending'`
    return row?.seconds ?? 0
  },
})

/**
 * One operation with its history, for the admin page: attempts, every audited transition, the events
 * that named it as evidence, approvals.
 */
export async function findOperationDetail(db: Database, id: string) {
  const [operation] = await db.select().from(operations).where(eq(operations.id, id))
  if (operation === undefined) return undefined
  return {
    operation,
    attempts: await listAttempts(db, id),
    audit: await listAudit(db, id),
    namedBy: await evidenceFor(db.$client, operation.operationKey),
    approvals: await db
      .select()
      .from(approvals)
      .where(eq(approvals.operationId, id))
      .orderBy(desc(approvals.createdAt), asc(approvals.id)),
  }
}

export type OperationDetail = NonNullable<Awaited<ReturnType<typeof findOperationDetail>>>
