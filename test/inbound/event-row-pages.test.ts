import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents, type NewEvent } from '../../src/db/claims.js'
import { markEnqueued } from '../../src/db/events.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

// A row as a Standard Webhooks delivery leaves it, its body apart (migration 0020): ~0.3 KB, about a
// dozen to a page, each grown by its first update (a job id and times).
const event = (eventId: string): NewEvent => ({
  source: 'acme',
  eventId,
  eventType: 'invoice.paid',
  payloadHash: 'a'.repeat(64),
  body: Buffer.from(JSON.stringify({ id: eventId, data: 'x'.repeat(720) })),
  headers: {
    'content-type': 'application/json',
    'user-agent': 'Svix-Webhooks/1.24.0',
    'webhook-id': eventId,
    'webhook-timestamp': '1700000000',
    'webhook-signature': `v1,${'K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4='}`,
  },
})

const pages = async (ids: readonly string[]) =>
  new Map(
    (
      await database.sql<Array<{ id: string; page: string }>>`
        select id, (ctid::text::point)[0]::text as page from inbound_events where id = any(${ids}::uuid[])`
    ).map((row) => [row.id, row.page]),
  )

describe('the pages of inbound_events', () => {
  // The enqueue mark is the update that needs no pruning first: the later ones find room once the
  // page is pruned of the versions before them, which a snapshot held anywhere in the database defers.
  it("keep room for a row's update, so its new version lands on the page of the old one", async () => {
    const claimed = await claimEvents(
      database.sql,
      Array.from({ length: 24 }, (_, i) => event(`evt_page_${i}`)),
    )
    const ids = claimed.map((result) => result.id)
    const inserted = await pages(ids)
    expect(new Set(inserted.values()).size).toBeGreaterThan(1)

    await markEnqueued(
      database.sql,
      ids.map((id) => ({ id, jobId: `evt-${id}` })),
    )
    expect(await pages(ids)).toEqual(inserted)
  })
})
