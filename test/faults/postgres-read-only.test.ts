import postgres from 'postgres'
import { afterAll, describe, expect, it } from 'vitest'
import { adminDatabaseUrl } from '../support/env.js'
import { signedHeaders } from '../support/signing.js'
import { serviceBehindProxy } from './ledger-outage.js'

// A ledger that answers but refuses every write: a standby reached after a failover (stale DNS, a
// virtual IP that moved late), or a database an operator or a managed service made read-only (a
// disk nearly full). The real service in a child process, its ledger behind the test's TCP proxy; a
// failover resets every connection, and the database is read-only for new sessions the way a
// standby is (SQLSTATE 25006 on a write), then writable again for new sessions only, as once the
// failover completes: sessions opened meanwhile stay read-only, so a pool that keeps them keeps
// failing.

const outage = serviceBehindProxy('hookledger-pg-read-only-')
const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
afterAll(async () => {
  await admin.end({ timeout: 5 })
})

async function readOnly(database: string, on: boolean): Promise<void> {
  await admin.unsafe(
    on
      ? `alter database "${database}" set default_transaction_read_only = on`
      : `alter database "${database}" reset default_transaction_read_only`,
  )
}

async function deliver(url: string, eventId: string) {
  const body = JSON.stringify({ type: 'order.paid', eventId })
  const response = await fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id: eventId }),
  })
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: (await response.json()) as { status?: string; error?: { code?: string; message?: string } },
  }
}

describe('a ledger that refuses writes', () => {
  it('answers 503 ledger_read_only, is not ready, writes nothing, and is writable again as soon as the server is', async () => {
    const running = await outage.start('all')
    const { database } = outage.harness
    try {
      expect((await deliver(running.url, 'ro_before')).status).toBe(200)

      // A failover: every connection reset, the address now leads to a server that refuses writes.
      await readOnly(database.name, true)
      expect(outage.proxy.reset()).toBeGreaterThan(0)
      // A statement on a connection just reset answers ledger_unavailable; the sessions after, read-only.
      let sent = 0
      await expect
        .poll(async () => (await deliver(running.url, `ro_reconnect_${sent++}`)).body.error?.code, {
          timeout: 10_000,
        })
        .toBe('ledger_read_only')
      const refused = []
      for (let i = 0; i < 5; i += 1) refused.push(await deliver(running.url, `ro_during_${i}`))
      for (const answer of refused) {
        expect(answer, running.output()).toMatchObject({
          status: 503,
          retryAfter: '5',
          body: { error: { code: 'ledger_read_only' } },
        })
      }
      const metrics = await (await fetch(`${running.url}/metrics`)).text()
      const counted = /hookledger_deliveries_total\{[^}]*outcome="ledger_read_only"[^}]*\} (\d+)/.exec(
        metrics,
      )
      expect(Number(counted?.[1])).toBeGreaterThanOrEqual(refused.length)
      // Not ready, and saying why.
      const ready = await fetch(`${running.url}/readyz`)
      expect(ready.status).toBe(503)
      expect(await ready.json()).toMatchObject({
        checks: { postgres: expect.stringMatching(/^read-only: /) },
      })

      // Writable again for new sessions; the sessions the service opened meanwhile are not.
      await readOnly(database.name, false)
      await expect
        .poll(async () => (await deliver(running.url, 'ro_after')).status, { timeout: 15_000, interval: 500 })
        .toBe(200)
      expect((await fetch(`${running.url}/readyz`)).status).toBe(200)

      const rows = await database.sql<{ event_id: string; status: string }[]>`
        select event_id, status::text from inbound_events order by event_id`
      // Nothing of the refused deliveries was written; the others end DONE.
      expect(rows.map((row) => row.event_id)).toEqual(['ro_after', 'ro_before'])
      // ro_before may have been mid-forward when the writes stopped: its lease runs out (4 s), then DONE.
      await expect
        .poll(
          async () => {
            const statuses = await database.sql<{ status: string }[]>`select status::text from inbound_events`
            return statuses.map((row) => row.status)
          },
          { timeout: 30_000, interval: 500 },
        )
        .toEqual(['done', 'done'])
      expect(running.process.exitCode, running.output()).toBeNull()
    } finally {
      await readOnly(database.name, false)
      await running.kill()
    }
  })
})
