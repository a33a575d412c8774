import { describe, expect, it } from 'vitest'
import { migrateLedger } from '../../src/db/migrate.js'
import { createLogger } from '../../src/logger.js'
import { ledgerAtMigration } from '../support/ledger-at-migration.js'

// Migration 0021: one index where two served the reads. operation_audit and operation_attempts are
// keyed by what they are read by, (operation_id, id) and (operation_id, attempt), instead of a
// bigserial id nothing reads by; event_attempts keeps only its primary key (event_row_id, id). Each
// forwarded event then writes four index entries fewer. Upgraded from a ledger of 0020 with rows in
// all three tables: the rows stay as they were, the keys refuse what the old unique index refused,
// and every read still goes through an index. Migration 0023 did the same for event_replays, read by
// event only: its primary key (event_row_id, id) is its one index.

const ledger = ledgerAtMigration(20)

/** The indexes of `table`, each with its columns in order. */
async function indexesOf(table: string): Promise<Array<{ name: string; primary: boolean; columns: string }>> {
  return ledger.sql<Array<{ name: string; primary: boolean; columns: string }>>`
    select c.relname as name, i.indisprimary as primary,
           (select string_agg(a.attname, ',' order by k.position)
            from unnest(i.indkey) with ordinality as k(attnum, position)
            join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum) as columns
    from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = ${table}::regclass order by c.relname`
}

/** The plan of `query` with sequential scans priced out, as one text. */
async function planOf(query: string, parameters: string[]): Promise<string> {
  const rows = await ledger.sql.begin(async (tx) => {
    await tx`set local enable_seqscan = off`
    return tx.unsafe(`explain ${query}`, parameters)
  })
  return rows.map((row) => Object.values(row)[0]).join('\n')
}

describe('migration 0021: the attempts and the audit keyed by what reads them', () => {
  it('keeps every row, enforces the same uniqueness with one index a table, and serves every read', async () => {
    const [operation] = await ledger.sql<Array<{ id: string }>>`
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status, attempts)
      values ('acme:evt_1:charge', 'charge', 'idempotent', 'h', '{}', 'completed', 2)
      returning id`
    const operationId = String(operation?.id)
    await ledger.sql`
      insert into operation_attempts (operation_id, attempt, attempt_key, status)
      values (${operationId}, 1, 'acme:evt_1:charge', 'unknown'), (${operationId}, 2, 'acme:evt_1:charge', 'succeeded')`
    await ledger.sql`
      insert into operation_audit (operation_id, operation_key, event, from_status, to_status, actor)
      values (${operationId}, 'acme:evt_1:charge', 'claimed', null, 'in_progress', 'runtime'),
             (${operationId}, 'acme:evt_1:charge', 'succeeded', 'in_progress', 'completed', 'runtime')`
    const [event] = await ledger.sql<Array<{ id: string }>>`
      insert into inbound_events (id, source, event_id, payload_hash, headers, status, received_at)
      values (hookledger_uuid_v7(now()), 'acme', 'evt_1', 'h', '{}', 'done', now())
      returning id`
    const eventRowId = String(event?.id)
    await ledger.sql`
      insert into event_attempts (event_row_id, attempt, outcome, error, started_at)
      values (${eventRowId}, 1, 'error', 'HTTP 503', now()), (${eventRowId}, 2, 'done', null, now())`
    await ledger.sql`
      insert into event_replays (event_row_id, replay, by, previous_attempts, previous_error)
      values (${eventRowId}, 1, 'ops@example.com', 2, 'HTTP 503')`
    const before = {
      replays: await ledger.sql`select * from event_replays order by id`,
      audit: await ledger.sql`select * from operation_audit order by id`,
      attempts: await ledger.sql`select * from operation_attempts order by id`,
      eventAttempts: await ledger.sql`select * from event_attempts order by id`,
    }

    await migrateLedger(ledger.url, createLogger('silent'))

    expect(await ledger.sql`select * from operation_audit order by id`).toEqual(before.audit)
    expect(await ledger.sql`select * from operation_attempts order by id`).toEqual(before.attempts)
    expect(await ledger.sql`select * from event_attempts order by id`).toEqual(before.eventAttempts)
    expect(await ledger.sql`select * from event_replays order by id`).toEqual(before.replays)

    expect(await indexesOf('operation_audit')).toEqual([
      { name: 'operation_audit_operation_id_id_pk', primary: true, columns: 'operation_id,id' },
    ])
    expect(await indexesOf('operation_attempts')).toEqual([
      { name: 'operation_attempts_operation_id_attempt_pk', primary: true, columns: 'operation_id,attempt' },
    ])
    // The partitioned table and the partition the event went to alike.
    const [partition] = await ledger.sql<Array<{ name: string }>>`
      select tableoid::regclass::text as name from event_attempts limit 1`
    const [replayPartition] = await ledger.sql<Array<{ name: string }>>`
      select tableoid::regclass::text as name from event_replays limit 1`
    for (const table of [
      'event_attempts',
      String(partition?.name),
      'event_replays',
      String(replayPartition?.name),
    ]) {
      expect((await indexesOf(table)).map(({ primary, columns }) => ({ primary, columns }))).toEqual([
        { primary: true, columns: 'event_row_id,id' },
      ])
    }

    // What the unique (operation_id, attempt) index refused, the key refuses.
    await expect(
      ledger.sql`
        insert into operation_attempts (operation_id, attempt, attempt_key)
        values (${operationId}, 2, 'acme:evt_1:charge')`,
    ).rejects.toMatchObject({ code: '23505', constraint_name: 'operation_attempts_operation_id_attempt_pk' })

    // The reads: an operation's audit in order (listAudit), one attempt (the settle, recordUndoRef),
    // an event's attempts (the event view).
    expect(
      await planOf('select * from operation_audit where operation_id = $1 order by id', [operationId]),
    ).toMatch(/Index (Only )?Scan (using|on) operation_audit_operation_id_id_pk/)
    expect(
      await planOf('select * from operation_attempts where operation_id = $1 and attempt = 2', [operationId]),
    ).toMatch(/Index (Only )?Scan (using|on) operation_attempts_operation_id_attempt_pk/)
    expect(
      await planOf('select * from event_attempts where event_row_id = $1 order by replay, attempt, id', [
        eventRowId,
      ]),
    ).toMatch(/Index (Only )?Scan (using|on) event_attempts_\d+_pkey/)
    // An event's replays (the event view).
    expect(
      await planOf('select * from event_replays where event_row_id = $1 order by replay', [eventRowId]),
    ).toMatch(/Index (Only )?Scan (using|on) event_replays_\d+_pkey/)
  })
})
