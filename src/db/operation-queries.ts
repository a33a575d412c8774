import { asc, desc, eq } from 'drizzle-orm'
import { listAttempts, listAudit } from '../outbound/store.js'
import type { Database } from './client.js'
import { approvals, operations } from './outbound-schema.js'

/** One operation with its history, for the admin page: attempts, every audited transition, approvals. */
export async function findOperationDetail(db: Database, id: string) {
  const [operation] = await db.select().from(operations).where(eq(operations.id, id))
  if (operation === undefined) return undefined
  return {
    operation,
    attempts: await listAttempts(db, id),
    audit: await listAudit(db, id),
    approvals: await db
      .select()
      .from(approvals)
      .where(eq(approvals.operationId, id))
      .orderBy(desc(approvals.createdAt), asc(approvals.id)),
  }
}

export type OperationDetail = NonNullable<Awaited<ReturnType<typeof findOperationDetail>>>
