import type postgres from 'postgres'
import { operationStatus } from './outbound-schema.js'

// The reads of `hookledger doctor` (src/doctor/): each bounded, none writes.

/** Part of an operation key as stepKey encodes it (src/outbound/keys.ts), in SQL. */
const encodedPart = (column: string) => `replace(replace(${column}, '%', '%25'), ':', '%3A')`
/** The reverse, for a part split off a key: '%3A' first, so an encoded '%' never turns into one. */
const decodedPart = (part: string) => `replace(replace(${part}, '%3A', ':'), '%25', '%')`

/** Every status but completed (the schema's own list): a forward in one of these did not deliver. */
const NOT_COMPLETED = operationStatus.enumValues.filter((status) => status !== 'completed')

/**
 * Whether the operation (`table`: its name or alias) is a source's own `:forward` that an earlier
 * version left: its source is one of `sendsOutsideLedger`, whose forward is now sent outside the
 * ledger, so nothing invokes or settles it again and no check reports it.
 */
function leftByEarlierVersion(client: postgres.Sql, table: string, sendsOutsideLedger: readonly string[]) {
  return client`(${client.unsafe(`${table}.tool`)} = 'forward' and ${client.unsafe(`${table}.operation_key`)} like '%:forward'
    and ${client.unsafe(decodedPart(`split_part(${table}.operation_key, ':', 1)`))} = any(${sendsOutsideLedger as string[]}::text[]))`
}

/** An operation key and its status (`null`: no such operation). */
export interface KeyStatus {
  key: string
  status: string | null
}

/**
 * Forward operations (`<source>:<event id>:forward` of a forward in code, `…:route:<route id>`) not
 * completed whose event is DONE: of the newest `limit` such operations. `sendsOutsideLedger`: the
 * sources whose own forward (`handler: forward`) is sent outside the ledger, whose `:forward`
 * operations an earlier version left are not this one's to settle.
 */
export async function openForwardsOfDoneEvents(
  client: postgres.Sql,
  limit: number,
  sendsOutsideLedger: readonly string[],
): Promise<KeyStatus[]> {
  return client<KeyStatus[]>`
    with open as (
      select operation_key, status::text as status,
        split_part(operation_key, ':', 1) as s, split_part(operation_key, ':', 2) as e
      from operations
      where status = any(${NOT_COMPLETED}::operation_status[]) and tool = 'forward'
        and (operation_key like '%:route:%'
             or (operation_key like '%:forward' and not ${leftByEarlierVersion(client, 'operations', sendsOutsideLedger)}))
      order by updated_at desc limit ${limit}
    )
    select o.operation_key as key, o.status from open o
    join inbound_events ev on ev.source = ${client.unsafe(decodedPart('o.s'))}
      and ev.event_id = ${client.unsafe(decodedPart('o.e'))} and ev.status = 'done'
    limit ${limit}`
}

/**
 * Of the newest `limit` events DONE within the last `days`, the forward operations they should have
 * (the routes done that forward) that are missing or not completed.
 */
export async function missingForwardsOfDoneEvents(
  client: postgres.Sql,
  options: {
    /** `<source>/<route id>` of every route that forwards. */
    forwardRoutes: readonly string[]
    days: number
    limit: number
  },
): Promise<KeyStatus[]> {
  const eventKey = client.unsafe(`${encodedPart('r.source')} || ':' || ${encodedPart('r.event_id')}`)
  return client<KeyStatus[]>`
    with recent as (
      select id, source, event_id from inbound_events
      where status = 'done' and processed_at > now() - ${options.days} * interval '1 day'
      order by received_at desc limit ${options.limit}
    ), expected as (
      select ${eventKey} || ':route:' || er.route_id as key
      from recent r join event_routes er on er.event_row_id = r.id and er.status = 'done'
      where r.source || '/' || er.route_id = any(${options.forwardRoutes as string[]}::text[])
    )
    select x.key, o.status::text as status from expected x
    left join operations o on o.operation_key = x.key
    -- A key over 255 characters is kept hashed (stepKey's %h parts), which is not rebuilt here:
    -- such an event is not checked rather than reported without cause.
    where length(x.key) <= 255 and o.status is distinct from 'completed'
    limit ${options.limit}`
}

/**
 * `in_progress` operations whose lease ran out more than `marginMs` ago, counted up to `limit`, and
 * the first `examples` of them (lease oldest first) with their newest attempt's status; not the
 * `:forward` operations an earlier version left for the sources in `sendsOutsideLedger`
 * (openForwardsOfDoneEvents).
 */
export async function expiredLeases(
  client: postgres.Sql,
  options: { sendsOutsideLedger: readonly string[]; marginMs: number; limit: number; examples: number },
): Promise<{ count: number; examples: Array<{ key: string; attempt: string | null }> }> {
  const expired = client`o.status = 'in_progress'
    and coalesce(o.lease_until, o.updated_at) < now() - ${options.marginMs} * interval '1 millisecond'
    and not ${leftByEarlierVersion(client, 'o', options.sendsOutsideLedger)}`
  const [{ n } = { n: 0 }] = await client<Array<{ n: number }>>`
    select count(*)::int as n from (select 1 from operations o where ${expired} limit ${options.limit}) x`
  if (n === 0) return { count: 0, examples: [] }
  const examples = await client<Array<{ key: string; attempt: string | null }>>`
    select o.operation_key as key, a.status::text as attempt from operations o
    left join operation_attempts a on a.operation_id = o.id and a.attempt = o.attempts
    where ${expired} order by o.lease_until nulls first limit ${options.examples}`
  return { count: n, examples }
}

/** A foreign key from a child table's column to its parent table's id. */
export interface ParentKey {
  table: string
  column: string
  parent: string
}

/** Whether `key` exists, and whether it is enforced (validated, its triggers enabled). */
export async function foreignKeyState(
  client: postgres.Sql,
  key: ParentKey,
): Promise<{ present: boolean; enforced: boolean }> {
  const [state] = await client<Array<{ present: boolean; enforced: boolean }>>`
    select count(c.oid) > 0 as present,
      coalesce(bool_and(c.convalidated and not exists (
        select 1 from pg_trigger t where t.tgconstraint = c.oid and t.tgenabled = 'D')), false) as enforced
    from pg_constraint c
    where c.contype = 'f' and c.conrelid = ${key.table}::regclass and c.confrelid = ${key.parent}::regclass`
  return state ?? { present: false, enforced: false }
}

/**
 * For the inbound ledger's partitioned tables, where each period's child partition has a foreign key
 * to its own period's events partition (migration 0018): whether that key exists and is enforced in
 * every period.
 */
export async function periodForeignKeyState(
  client: postgres.Sql,
  key: ParentKey,
): Promise<{ present: boolean; enforced: boolean }> {
  const [state] = await client<Array<{ present: boolean; enforced: boolean }>>`
    select coalesce(bool_and(k.present), true) as present, coalesce(bool_and(k.enforced), true) as enforced
    from ledger_periods p
    cross join lateral (
      select count(c.oid) > 0 as present,
        coalesce(bool_and(c.convalidated and not exists (
          select 1 from pg_trigger t where t.tgconstraint = c.oid and t.tgenabled = 'D')), false) as enforced
      from pg_constraint c
      where c.contype = 'f' and c.conrelid = to_regclass(${key.table} || '_' || p.suffix)
        and c.confrelid = to_regclass(${key.parent} || '_' || p.suffix)) k`
  return state ?? { present: false, enforced: false }
}

/** Of the newest `limit` rows of `key.table`, those whose parent row does not exist. */
export async function orphanRows(
  client: postgres.Sql,
  key: ParentKey,
  limit: number,
): Promise<Array<{ id: string; parent: string }>> {
  const { table, column, parent } = key
  return client<Array<{ id: string; parent: string }>>`
    select a.id::text as id, a.${client(column)}::text as parent
    from (select id, ${client(column)} from ${client(table)} order by id desc limit ${limit}) a
    where not exists (select 1 from ${client(parent)} p where p.id = a.${client(column)})
    limit ${limit}`
}

/**
 * Of the `limit` operations longest in `needs_reconciliation`, those there for over `olderThanMs`,
 * counted from the audit entry that put them there (the reconciler's lease moves updated_at on
 * every try).
 */
export async function longReconciliations(
  client: postgres.Sql,
  options: { olderThanMs: number; limit: number },
): Promise<Array<{ key: string; tool: string; since: Date; error: string | null }>> {
  return client<Array<{ key: string; tool: string; since: Date; error: string | null }>>`
    select * from (
      select o.operation_key as key, o.tool, o.last_error as error,
        coalesce((select max(au.at) from operation_audit au
          where au.operation_id = o.id and au.to_status = 'needs_reconciliation'), o.updated_at) as since
      from operations o where o.status = 'needs_reconciliation'
      order by o.updated_at limit ${options.limit}
    ) x where since < now() - ${options.olderThanMs} * interval '1 millisecond'
    order by since`
}

/**
 * Up to `limit` PENDING rows (and PROCESSING rows whose lease ran out) that nothing has touched for
 * `quietMs`, oldest first, with the batch job they were first enqueued in.
 */
export async function quietUnfinishedEvents(
  client: postgres.Sql,
  options: { quietMs: number; limit: number },
): Promise<Array<{ id: string; job_id: string | null }>> {
  return client<Array<{ id: string; job_id: string | null }>>`
    select id, job_id from inbound_events
    where status in ('pending', 'processing')
      and greatest(received_at, next_attempt_at, lease_until, updated_at) < now() - ${options.quietMs} * interval '1 millisecond'
    order by received_at limit ${options.limit}`
}

/** These server settings as a session of this database sees them (role and database settings included). */
export async function serverSettings(
  client: postgres.Sql,
  names: readonly string[],
): Promise<Map<string, string>> {
  const rows = await client<Array<{ name: string; setting: string }>>`
    select name, setting from pg_settings where name = any(${names as string[]}::text[])`
  return new Map(rows.map((row) => [row.name, row.setting]))
}

/** Ledger tables whose own `autovacuum_enabled` is set to something `isTrue` (a regex source) rejects. */
export async function tablesWithAutovacuumOff(client: postgres.Sql, isTrue: string): Promise<string[]> {
  const rows = await client<Array<{ name: string }>>`
    select c.relname as name from pg_class c
    where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p')
      and exists (select 1 from unnest(c.reloptions) o
        where o ilike 'autovacuum_enabled=%' and not split_part(o, '=', 2) ~* ${isTrue})
    order by c.relname`
  return rows.map((row) => row.name)
}

/** PostgreSQL's clock, in Unix milliseconds. */
export async function databaseClockMs(client: postgres.Sql): Promise<number> {
  const [row] = await client<Array<{ now: string }>>`
    select (extract(epoch from clock_timestamp()) * 1000)::text as now`
  return Number(row?.now)
}

/**
 * How far ahead of now the ledger's periods and key generations reach, in hours (negative: they end
 * before now), or null when there are none. A claim needs both for its own time.
 */
export async function partitionsReach(
  client: postgres.Sql,
): Promise<{ periodHours: number | null; generationHours: number | null }> {
  const [row] = await client<Array<{ period_hours: number | null; generation_hours: number | null }>>`
    select extract(epoch from (select max(ends) from ledger_periods) - now()) / 3600 as period_hours,
           extract(epoch from (select max(ends) from inbound_key_generations) - now()) / 3600 as generation_hours`
  return {
    periodHours: row?.period_hours == null ? null : Number(row.period_hours),
    generationHours: row?.generation_hours == null ? null : Number(row.generation_hours),
  }
}
