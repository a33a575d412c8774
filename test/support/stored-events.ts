import { randomUUID } from 'node:crypto'
import { eq, getTableColumns, type SQL } from 'drizzle-orm'
import type postgres from 'postgres'
import { claimEvents, type NewEvent } from '../../src/db/claims.js'
import type { Database } from '../../src/db/client.js'
import { inboundEventPayloads, inboundEvents } from '../../src/db/schema.js'

/** Event rows with the exact bytes received, which the claim writes to inbound_event_payloads. */
export function storedEvents(db: Database, where?: SQL) {
  return db
    .select({ ...getTableColumns(inboundEvents), body: inboundEventPayloads.body })
    .from(inboundEvents)
    .innerJoin(inboundEventPayloads, eq(inboundEventPayloads.eventRowId, inboundEvents.id))
    .where(where)
}

/** A new event of `source` as the api hands it to the claim: a small JSON body naming its id. */
export function newEvent(eventId: string, source = 'acme'): NewEvent {
  return {
    source,
    eventId,
    eventType: null,
    payloadHash: 'a'.repeat(64),
    body: Buffer.from(`{"id":"${eventId}"}`),
    headers: {},
  }
}

/** The row ids of `count` new events of `source` claimed now (PENDING, each its own event id). */
export async function claimedEventIds(sql: postgres.Sql, count: number, source = 'acme'): Promise<string[]> {
  const results = await claimEvents(
    sql,
    Array.from({ length: count }, () => newEvent(`evt_${randomUUID()}`, source)),
  )
  return results.map((result) => result.id)
}
