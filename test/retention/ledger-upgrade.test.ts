import { describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { migrateLedger } from '../../src/db/migrate.js'
import { createLogger } from '../../src/logger.js'
import { ledgerAtMigration } from '../support/ledger-at-migration.js'

// The upgrade of a ledger made before partitioning (migration 0017) to the partitioned one (0018):
// every row moves under a time-ordered id of its received_at into the partition of its day, what
// hangs off it follows, unfinished events go back to the relay, and every event already claimed is
// still a duplicate.

const logger = createLogger('silent')
const ledger = ledgerAtMigration(17)
const url = ledger.url

describe('upgrading an unpartitioned ledger', () => {
  it('moves every event and what hangs off it into the partition of its day, under an id of its time', async () => {
    const [before] = await ledger.sql<Array<{ partitioned: boolean }>>`
      select relkind = 'p' as partitioned from pg_class where relname = 'inbound_events'`
    expect(before?.partitioned).toBe(false)
    // Events of three days, in every status, as the old ledger keeps them.
    const seeded = await ledger.sql<Array<{ id: string; event_id: string }>>`
      insert into inbound_events (source, event_id, payload_hash, body, headers, status, received_at, enqueued_at,
                                  job_id, lease_token, lease_until, body_key)
      values
        ('acme', 'done', ${'1'.repeat(64)}, '\\x7b7d', '{}', 'done', now() - interval '2 days', now(), 'evt-a', null, null, null),
        ('acme', 'pending', ${'2'.repeat(64)}, '\\x7b7d', '{}', 'pending', now() - interval '1 day', now(), 'evt-b', null, null, null),
        ('acme', 'processing', ${'3'.repeat(64)}, '\\x7b7d', '{}', 'processing', now(), now(), 'evt-c', gen_random_uuid(), now() + interval '1 minute', null),
        ('acme', 'failed', ${'4'.repeat(64)}, '\\x7b7d', '{}', 'failed', now() - interval '2 days', now(), 'evt-d', null, null, null),
        ('bodies', 'by-body', ${'5'.repeat(64)}, '\\x7b7d', '{}', 'done', now(), now(), 'evt-e', null, null, ${'5'.repeat(64)})
      returning id, event_id`
    const old = Object.fromEntries(seeded.map((row) => [row.event_id, row.id]))
    await ledger.sql`insert into inbound_event_payloads (event_row_id, body) values (${old.done ?? ''}, '{"a":1}')`
    await ledger.sql`
      insert into event_attempts (event_row_id, attempt, outcome, started_at)
      values (${old.done ?? ''}, 1, 'done', now()), (${old.failed ?? ''}, 1, 'error', now()), (${old.failed ?? ''}, 2, 'error', now())`
    await ledger.sql`
      insert into event_replays (event_row_id, replay, by, previous_attempts)
      values (${old.failed ?? ''}, 1, 'admin', 2)`
    await ledger.sql`insert into event_routes (event_row_id, route_id, status) values (${old.done ?? ''}, 'crm', 'done')`
    await ledger.sql`
      insert into event_ordering_keys (event_row_id, route_id, source, key_hash, seq)
      values (${old.pending ?? ''}, '', 'acme', '\\x01', 1)`
    await ledger.sql`
      insert into operation_evidence (source, event_id, event_row_id, operation_key, outcome)
      values ('acme', 'done', ${old.done ?? ''}, 'agents/pay-1', 'succeeded')`

    await migrateLedger(url, logger)

    const [after] = await ledger.sql<Array<{ partitioned: boolean }>>`
      select relkind = 'p' as partitioned from pg_class where relname = 'inbound_events'`
    expect(after?.partitioned).toBe(true)
    const rows = await ledger.sql<
      Array<{
        event_id: string
        id: string
        partition: string
        day: string
        id_matches_time: boolean
        status: string
        enqueued: boolean
        job_id: string | null
        lease_token: string | null
      }>
    >`
      select event_id, id::text, tableoid::regclass::text as partition,
             to_char(received_at at time zone 'UTC', 'YYYYMMDD') as day,
             ('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
               = floor(extract(epoch from received_at) * 1000)::bigint as id_matches_time,
             status::text, enqueued_at is not null as enqueued, job_id, lease_token::text
      from inbound_events order by event_id`
    expect(rows).toHaveLength(5)
    for (const row of rows) {
      expect(row.id).not.toBe(old[row.event_id])
      expect(row.id[14]).toBe('7') // version 7
      expect(row.id_matches_time).toBe(true)
      expect(row.partition).toBe(`inbound_events_${row.day}`)
    }
    const byEvent = Object.fromEntries(rows.map((row) => [row.event_id, row]))
    // Unfinished events lost their queue jobs (the jobs name the old ids): the relay enqueues them again.
    expect(byEvent.pending).toMatchObject({ status: 'pending', enqueued: false, job_id: null })
    expect(byEvent.processing).toMatchObject({
      status: 'pending',
      enqueued: false,
      job_id: null,
      lease_token: null,
    })
    expect(byEvent.done).toMatchObject({ status: 'done', enqueued: true, job_id: 'evt-a' })
    expect(byEvent.failed).toMatchObject({ status: 'failed', enqueued: true })

    const [children] = await ledger.sql<
      Array<{
        payloads: string[]
        attempts: string[]
        replays: string[]
        route: string
        ordering: string
        evidence: string
      }>
    >`
      select (select array_agg(e.event_id order by e.event_id) from inbound_event_payloads p
              join inbound_events e on e.id = p.event_row_id where p.body = '\\x7b7d') as payloads,
             (select array_agg(e.event_id order by a.attempt, e.event_id) from event_attempts a join inbound_events e on e.id = a.event_row_id) as attempts,
             (select array_agg(e.event_id) from event_replays r join inbound_events e on e.id = r.event_row_id) as replays,
             (select e.event_id from event_routes r join inbound_events e on e.id = r.event_row_id) as route,
             (select e.event_id from event_ordering_keys k join inbound_events e on e.id = k.event_row_id) as ordering,
             (select e.event_id from operation_evidence v join inbound_events e on e.id = v.event_row_id) as evidence`
    expect(children).toEqual({
      // Migration 0020 moved every body there.
      payloads: ['by-body', 'done', 'failed', 'pending', 'processing'],
      attempts: ['done', 'failed', 'failed'],
      replays: ['failed'],
      route: 'done',
      ordering: 'pending',
      evidence: 'done',
    })
    const [old_tables] = await ledger.sql<Array<{ n: number }>>`
      select count(*)::int as n from pg_class where relname like '%\\_unpartitioned'`
    expect(old_tables?.n).toBe(0)

    // Every event claimed before the upgrade is a duplicate after it, by id and by body.
    const claims = await claimEvents(ledger.sql, [
      {
        source: 'acme',
        eventId: 'done',
        eventType: null,
        payloadHash: '1'.repeat(64),
        body: Buffer.from('{}'),
        headers: {},
      },
      {
        source: 'bodies',
        eventId: 'fresh-id-same-body',
        eventType: null,
        payloadHash: '5'.repeat(64),
        body: Buffer.from('{}'),
        headers: {},
        bodyKey: '5'.repeat(64),
      },
      {
        source: 'acme',
        eventId: 'new',
        eventType: null,
        payloadHash: '6'.repeat(64),
        body: Buffer.from('{}'),
        headers: {},
      },
    ])
    expect(claims).toEqual([
      { kind: 'duplicate', id: byEvent.done?.id },
      { kind: 'replay', id: byEvent['by-body']?.id },
      { kind: 'accepted', id: expect.any(String) },
    ])
  })
})
