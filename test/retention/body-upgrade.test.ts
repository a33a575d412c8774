import { describe, expect, it } from 'vitest'
import { LEDGER_TABLES } from '../../src/db/ledger-periods.js'
import { migrateLedger } from '../../src/db/migrate.js'
import { createLogger } from '../../src/logger.js'
import { ledgerAtMigration } from '../support/ledger-at-migration.js'
import { addPastPeriods } from '../support/periods.js'

// The upgrade of a ledger of migration 0019 (the body in inbound_events, its jsonb parse in
// inbound_event_payloads) to 0020 (the exact bytes in inbound_event_payloads only): every body
// moves byte for byte, the payload search finds what it found, and a period a retention pass left
// half dropped is finished first, as the partition keeper would.

const logger = createLogger('silent')
const ledger = ledgerAtMigration(19)
const url = ledger.url

/** An event as 0019 stores it, `daysAgo` days back: the bytes on the row, the parse beside it. */
async function seedOld(eventId: string, body: Buffer, status: string, daysAgo: number): Promise<void> {
  const [row] = await ledger.sql<Array<{ id: string }>>`
    insert into inbound_events (id, source, event_id, payload_hash, body, headers, status, received_at)
    values (hookledger_uuid_v7(now() - ${daysAgo} * interval '1 day'), 'acme', ${eventId}, 'h', ${body}, '{}',
            ${status}::event_status, now() - ${daysAgo} * interval '1 day')
    returning id`
  await ledger.sql`
    insert into inbound_event_payloads (event_row_id, body)
    select ${String(row?.id)}::uuid, parsed from hookledger_body_json(${body}::bytea) as parsed where parsed is not null`
}

describe('migration 0020: the body written once', () => {
  it('moves every body byte for byte, keeps the search, and finishes half-dropped periods first', async () => {
    const [done, kept] = await addPastPeriods(ledger.sql, { daysAgo: [40, 39] })
    const json = Buffer.from('{"data":{"object":{"customer":"cus_9"}},  "spacing":"kept"}')
    const form = Buffer.from('a=1&b=%00')
    const binary = Buffer.from([0, 255, 10, 13, 92, 34])
    await seedOld('today_json', json, 'pending', 0)
    await seedOld('today_form', form, 'done', 0)
    await seedOld('today_binary', binary, 'failed', 0)
    await seedOld('expired_done', json, 'done', 40)
    await seedOld('replayed_failed', json, 'failed', 39)
    // A retention pass that detached both past periods and stopped before it dropped them: the first
    // holds only DONE events (the keeper drops it), the second a FAILED one (the keeper attaches it).
    for (const suffix of [done, kept]) {
      for (const table of LEDGER_TABLES)
        await ledger.sql.unsafe(`alter table "${table}" detach partition "${table}_${suffix}"`)
    }

    await migrateLedger(url, logger)

    const columns = await ledger.sql<Array<{ table: string; column: string; type: string }>>`
      select table_name as table, column_name as column, data_type as type from information_schema.columns
      where table_name in ('inbound_events', 'inbound_event_payloads') and column_name = 'body'`
    expect(columns).toEqual([{ table: 'inbound_event_payloads', column: 'body', type: 'bytea' }])
    const bodies = await ledger.sql<Array<{ event_id: string; body: Buffer; partition: string }>>`
      select e.event_id, p.body, p.tableoid::regclass::text as partition
      from inbound_events e join inbound_event_payloads p on p.event_row_id = e.id order by e.event_id`
    expect(bodies.map((row) => [row.event_id, row.body.toString('hex')])).toEqual([
      ['replayed_failed', json.toString('hex')],
      ['today_binary', binary.toString('hex')],
      ['today_form', form.toString('hex')],
      ['today_json', json.toString('hex')],
    ])
    expect(bodies[0]?.partition).toBe(`inbound_event_payloads_${kept}`)
    const periods = await ledger.sql<Array<{ suffix: string }>>`select suffix from ledger_periods`
    expect(periods.map((row) => row.suffix)).not.toContain(done)
    const [leftover] = await ledger.sql<Array<{ n: number }>>`
      select count(*)::int as n from pg_class where relname like ${`%\\_${done}`}`
    expect(leftover?.n).toBe(0)

    // The search's index, parsed from the bytes: both JSON bodies, not the others.
    await ledger.sql`set enable_seqscan = off`
    const found = await ledger.sql<Array<{ event_id: string }>>`
      select e.event_id from inbound_events e join inbound_event_payloads p on p.event_row_id = e.id
      where hookledger_body_json(p.body) @> '{"data":{"object":{"customer":"cus_9"}}}' order by e.event_id`
    expect(found.map((row) => row.event_id)).toEqual(['replayed_failed', 'today_json'])
    const plan = await ledger.sql`
      explain select event_row_id from inbound_event_payloads
      where hookledger_body_json(body) @> '{"data":{"object":{"customer":"cus_9"}}}'`
    expect(plan.map((row) => Object.values(row)[0]).join('\n')).toMatch(/Bitmap Index Scan on \S+body\S*_idx/)
  })
})
