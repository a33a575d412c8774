import type postgres from 'postgres'
import type { EventStatus } from './schema.js'

/** The oldest unfinished event that must go before another one with the same ordering key. */
export interface OrderingHead {
  id: string
  eventId: string
  status: EventStatus
  /** Another unfinished event of the key stands between the head and the one that asked. */
  behindOthers: boolean
}

/** An event's key in one scope: '' is the source's own orderingKey, else a route's id. */
export interface OrderingKeyRow {
  routeId: string
  /** sha256 (hex) of the pointer and the canonical JSON of the value there. */
  keyHash: string
}

/** The source scope's route_id: route ids are never empty. */
export const SOURCE_SCOPE = ''

/**
 * An event's position in line: received_seq, or for an event claimed before received_seq existed
 * (migration 0009) a negative number in received_at order, so those go first and keep their order.
 */
const SEQ_OF = (alias: string) =>
  `coalesce(${alias}.received_seq, (extract(epoch from ${alias}.received_at) * 1000000)::bigint - 9000000000000000000)`

/** The head lookup's answer: what blocks the event, and whether its own key row is in place. */
export interface OrderingLookup {
  head: OrderingHead | undefined
  /** The event has its key row in this scope with this hash; when not, recordOrderingKey writes it. */
  recorded: boolean
}

/**
 * The earliest event of the same source, received before this one, with the same key in this scope
 * (`routeId`, '' for the source's own key) and not done: not DONE, and with a route, its delivery to
 * that route not done, where an event not yet looked at counts too (it may match the route). One
 * probe of event_ordering_keys' partial index, read only: a write in it (even an upsert that
 * changes nothing) made every check commit to the WAL, 3.0 ms instead of 0.4.
 */
export async function findOrderingHead(
  client: postgres.Sql,
  eventRowId: string,
  routeId: string,
  keyHash: string,
): Promise<OrderingLookup> {
  const [row] = await client<
    Array<{
      id: string | null
      event_id: string | null
      status: EventStatus | null
      behind_others: boolean | null
      recorded: boolean
    }>
  >`
    with me as (
      select e.id, e.source, ${client.unsafe(SEQ_OF('e'))} as seq from inbound_events e where e.id = ${eventRowId})
    select h.id, h.event_id, h.status,
      h.id is not null and exists (
        -- Stops at the first: the event right behind the head, when it is not the one asking.
        select 1 from event_ordering_keys k
        join inbound_events o on o.id = k.event_row_id
        where k.source = me.source and k.route_id = ${routeId} and k.key_hash = h.key_hash
          and k.held and k.seq > h.seq and k.seq < me.seq
          and o.status in ('pending', 'processing', 'failed')
          ${routeId === SOURCE_SCOPE ? client`` : unfinishedOnRoute(client, routeId)}) as behind_others,
      exists (select 1 from event_ordering_keys k
              where k.event_row_id = me.id and k.route_id = ${routeId}
                and k.key_hash = decode(${keyHash}, 'hex')) as recorded
    -- Lateral, so the line is walked in the index's seq order and stops at the first unfinished
    -- event; as a plain join the planner read all 800 of a held key and sorted them.
    from me left join lateral (
      select o.id, o.event_id, o.status, k.key_hash, k.seq
      from event_ordering_keys k
      join inbound_events o on o.id = k.event_row_id
      where k.source = me.source and k.route_id = ${routeId} and k.key_hash = decode(${keyHash}, 'hex')
        and k.held and k.seq < me.seq and o.status in ('pending', 'processing', 'failed')
        ${routeId === SOURCE_SCOPE ? client`` : unfinishedOnRoute(client, routeId)}
      order by k.seq
      limit 1) h on true`
  if (row === undefined) return { head: undefined, recorded: true }
  const head =
    row.id === null || row.event_id === null || row.status === null
      ? undefined
      : { id: row.id, eventId: row.event_id, status: row.status, behindOthers: row.behind_others === true }
  return { head, recorded: row.recorded }
}

/**
 * Writes an event's key row in a scope, or corrects its hash: for an event claimed before the key
 * was configured (or changed), so the events behind it find it.
 */
export async function recordOrderingKey(
  client: postgres.Sql,
  eventRowId: string,
  routeId: string,
  keyHash: string,
): Promise<void> {
  await client`
    insert into event_ordering_keys as k (event_row_id, route_id, source, key_hash, seq)
    select e.id, ${routeId}, e.source, decode(${keyHash}, 'hex'), ${client.unsafe(SEQ_OF('e'))}
    from inbound_events e where e.id = ${eventRowId}
    on conflict (event_row_id, route_id) do update set key_hash = excluded.key_hash, held = true`
}

function unfinishedOnRoute(client: postgres.Sql, routeId: string) {
  return client`
      and not exists (select 1 from event_routes r
                      where r.event_row_id = o.id and r.route_id = ${routeId} and r.status = 'done')
      and (not exists (select 1 from event_routes r where r.event_row_id = o.id)
           or exists (select 1 from event_routes r where r.event_row_id = o.id and r.route_id = ${routeId}))`
}

/** The next event of a key, as the hand-off finds it. */
export interface NextInLine {
  id: string
  /** `waiting` on its recheck timer, or `running`: leased, perhaps looking at the line right now. */
  state: 'waiting' | 'running'
}

/**
 * The hand-off, once an event is done in a scope: its key leaves the line, and the returned event
 * (the next of the key) can be started at once instead of when its timer fires. Undefined when
 * the next one is still queued for its first try, FAILED (it holds the key until a person replays
 * it), or there is none.
 */
export async function releaseOrderingKey(
  client: postgres.Sql,
  eventRowId: string,
  routeId: string,
): Promise<NextInLine | undefined> {
  const [next] = await client<Array<{ id: string; state: NextInLine['state'] | null }>>`
    with
    -- held is only a hint that keeps finished events out of the index's way (the lookups test each
    -- event's status too), so this commit need not wait for the WAL flush: ~0.35 ms instead of
    -- ~3.9 on a busy 2-core machine, on the path from one event of a key to the next. A crash
    -- loses at most the hint.
    async_commit as (select set_config('synchronous_commit', 'off', true)),
    mine as (
      update event_ordering_keys set held = false
      where event_row_id = ${eventRowId} and route_id = ${routeId} and held
        and exists (select 1 from async_commit)
      returning source, key_hash, seq)
    select n.id, case when n.status = 'processing' then 'running'
                      when n.status = 'pending' and n.next_attempt_at is not null then 'waiting' end as state
    from mine cross join lateral (
      select o.id, o.status, o.next_attempt_at
      from event_ordering_keys k
      join inbound_events o on o.id = k.event_row_id
      where k.source = mine.source and k.route_id = ${routeId} and k.key_hash = mine.key_hash
        and k.held and k.seq > mine.seq and o.status in ('pending', 'processing', 'failed')
        ${routeId === SOURCE_SCOPE ? client`` : unfinishedOnRoute(client, routeId)}
      order by k.seq
      limit 1) n`
  return next === undefined || next.state === null ? undefined : { id: next.id, state: next.state }
}

/** The most rows one catch-up statement reads: the unfinished events of one source. */
const CATCH_UP_BATCH = 1000

/**
 * Writes the key rows of a source's unfinished events that have none in this scope: events claimed
 * before this version, by a process without the scope's key configured, or before it was. Run once
 * per process and scope before its first lookup. `keyOf` gives an event's key hash from its body.
 */
export async function catchUpOrderingKeys(
  client: postgres.Sql,
  source: string,
  routeId: string,
  keyOf: (body: Buffer) => string | undefined,
): Promise<number> {
  let written = 0
  let after = '00000000-0000-0000-0000-000000000000'
  for (;;) {
    const rows = await client<Array<{ id: string; body: Buffer; seq: string }>>`
      select e.id, p.body, ${client.unsafe(SEQ_OF('e'))}::text as seq
      from inbound_events e join inbound_event_payloads p on p.event_row_id = e.id
      where e.source = ${source} and e.status in ('pending', 'processing', 'failed') and e.id > ${after}
        and not exists (select 1 from event_ordering_keys k where k.event_row_id = e.id and k.route_id = ${routeId})
      order by e.id
      limit ${CATCH_UP_BATCH}`
    const keyed = rows.flatMap((row) => {
      const keyHash = keyOf(row.body)
      return keyHash === undefined ? [] : [{ id: row.id, seq: row.seq, keyHash }]
    })
    if (keyed.length > 0) {
      await client`
        insert into event_ordering_keys (event_row_id, route_id, source, key_hash, seq)
        select id, ${routeId}, ${source}, decode(key_hash, 'hex'), seq::bigint
        from unnest(${keyed.map((k) => k.id)}::uuid[], ${keyed.map((k) => k.keyHash)}::text[],
                    ${keyed.map((k) => k.seq)}::text[]) as i(id, key_hash, seq)
        on conflict do nothing`
      written += keyed.length
    }
    const last = rows.at(-1)
    if (rows.length < CATCH_UP_BATCH || last === undefined) return written
    after = last.id
  }
}
