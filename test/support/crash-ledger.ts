import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { inboundEvents } from '../../src/db/schema.js'
import type { ServiceHarness } from './service.js'
import { signedHeaders } from './signing.js'

/** A signed `order.paid` delivery of `eventId` to the source `acme`, as the crash and queue tests send it. */
export function deliverOrder(url: string, eventId: string) {
  const body = JSON.stringify({ type: 'order.paid', eventId })
  return fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id: eventId }),
  })
}

/**
 * What a crash test reads back after a kill: the event's row, how many times the handler's write
 * committed (`handler_effects`), and how many times the handler started (the crash server's log in
 * the harness's folder).
 */
export function crashWitness(harness: Pick<ServiceHarness, 'database' | 'directory'>) {
  return {
    async rowFor(eventId: string) {
      const db = harness.database.db
      return (await db.select().from(inboundEvents).where(eq(inboundEvents.eventId, eventId)))[0]
    },
    async effects(eventId: string) {
      const rows = await harness.database.sql<Array<{ n: number }>>`
        select count(*)::int as n from handler_effects where event_id = ${eventId}`
      return rows[0]?.n
    },
    invocations(eventId: string) {
      let log = ''
      try {
        log = readFileSync(join(harness.directory, 'invocations.log'), 'utf8')
      } catch {}
      return log.split('\n').filter((line) => line.startsWith(`${eventId} `)).length
    },
  }
}
