import { eq, getTableColumns, type SQL } from 'drizzle-orm'
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
