import { createHash } from 'node:crypto'
import type { Database } from '../../src/db/client.js'
import { approvals, operations } from '../../src/db/outbound-schema.js'
import { type EventStatus, inboundEventPayloads, inboundEvents } from '../../src/db/schema.js'
import { payloadHash } from '../../src/outbound/hash.js'

/** Ledger rows as the receiver and worker leave them, written directly so a test controls every field. */
export async function seedEvent(
  db: Database,
  row: {
    source?: string
    eventId: string
    eventType?: string | null
    status?: EventStatus
    attempts?: number
    lastError?: string | null
    receivedAt?: Date
    body?: string
  },
): Promise<string> {
  const body = Buffer.from(row.body ?? JSON.stringify({ id: row.eventId, type: row.eventType ?? null }))
  const [inserted] = await db
    .insert(inboundEvents)
    .values({
      source: row.source ?? 'acme',
      eventId: row.eventId,
      eventType: row.eventType ?? null,
      payloadHash: createHash('sha256').update(body).digest('hex'),
      headers: { 'content-type': 'application/json', 'webhook-id': row.eventId },
      status: row.status ?? 'done',
      attempts: row.attempts ?? 1,
      lastError: row.lastError ?? null,
      receivedAt: row.receivedAt ?? new Date(),
      enqueuedAt: new Date(),
    })
    .returning({ id: inboundEvents.id })
  if (inserted === undefined) throw new Error('insert returned nothing')
  // The exact bytes, as the claim writes them (src/db/claims.ts).
  await db.insert(inboundEventPayloads).values({ eventRowId: inserted.id, body })
  return inserted.id
}

/** An operation a reconciler escalated: awaiting approval, with a pending question and its evidence. */
export async function seedPendingApproval(
  db: Database,
  key: string,
  args: unknown = { amount: 100 },
): Promise<{ operationId: string; approvalId: string; payloadHash: string }> {
  const hash = payloadHash(args)
  const [op] = await db
    .insert(operations)
    .values({
      operationKey: key,
      tool: 'charge',
      effectClass: 'irreversible',
      payloadHash: hash,
      args,
      status: 'awaiting_approval',
      attempts: 1,
      lastError: 'socket hang up',
    })
    .returning({ id: operations.id })
  if (op === undefined) throw new Error('insert returned nothing')
  const [approval] = await db
    .insert(approvals)
    .values({
      operationId: op.id,
      action: 'execute',
      payloadHash: hash,
      reason: 'reconciliation found no charge for this key',
      evidence: { query: key, matches: 0 },
      proposedAction: 'retry',
    })
    .returning({ id: approvals.id })
  if (approval === undefined) throw new Error('insert returned nothing')
  return { operationId: op.id, approvalId: approval.id, payloadHash: hash }
}
