import type postgres from 'postgres'

/**
 * Adds the ledger periods (UTC days) that rows dated up to `since` ago need (a row's period is its
 * id's time, `hookledger_uuid_v7(at)`). A new ledger has today's period and those ahead only, so a
 * test seeding rows an hour back failed in the first hour after midnight UTC: "no partition of
 * relation "inbound_events" found for row".
 */
export async function addPeriodsSince(sql: postgres.Sql, since: string): Promise<void> {
  await sql`
    select hookledger_add_ledger_period(d, d + interval '1 day')
    from generate_series(date_trunc('day', now() - ${since}::interval, 'UTC'),
                         date_trunc('day', now(), 'UTC') - interval '1 day', interval '1 day') as d
    where not exists (select 1 from ledger_periods p where p.starts = d)`
}
