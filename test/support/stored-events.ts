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

/**
 * The row ids of new events of `source` with these ids, claimed now in one statement: PENDING rows
 * committed without a job, as after a lost enqueue (the relay hands them on).
 */
export async function claimRows(
  sql: postgres.Sql,
  eventIds: readonly string[],
  source = 'acme',
): Promise<string[]> {
  const results = await claimEvents(
    sql,
    eventIds.map((eventId) => newEvent(eventId, source)),
  )
  return results.map((result) => result.id)
}

/** The row ids of `count` new events of `source` claimed now (PENDING, each its own event id). */
export async function claimedEventIds(sql: postgres.Sql, count: number, source = 'acme'): Promise<string[]> {
  return claimRows(
    sql,
    Array.from({ length: count }, () => `evt_${randomUUID()}`),
    source,
  )
}

/**
 * The event row alone of an event received `daysAgo` days ago, in that day's period (its id made
 * from that time): what retention and the partition keeper see of such an event. Answers its row id.
 */
export async function insertAgedEvent(
  sql: postgres.Sql,
  event: { eventId: string; status: string; daysAgo: number },
): Promise<string> {
  const [row] = await sql<Array<{ id: string }>>`
    insert into inbound_events (id, source, event_id, payload_hash, headers, status, received_at)
    values (hookledger_uuid_v7(now() - ${event.daysAgo} * interval '1 day'), 'acme', ${event.eventId},
            ${'a'.repeat(64)}, '{}', ${event.status}::event_status, now() - ${event.daysAgo} * interval '1 day')
    returning id`
  return String(row?.id)
}
