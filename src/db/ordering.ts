import type postgres from 'postgres'
import type { EventStatus } from './schema.js'

/** The oldest unfinished event that must go before another one with the same ordering key. */
export interface OrderingHead {
  id: string
  eventId: string
  status: EventStatus
}

/** An event's ordering key: the value at the pointer's path; `inArray[i]` when step i indexes an array. */
export interface OrderingKeyValue {
  path: readonly string[]
  inArray: readonly boolean[]
  value: unknown
}

/**
 * The earliest event of the same source, received before this one (received_seq), whose body has
 * the same ordering key (`value` at `path`) and which is not DONE. With a
 * route, only events whose delivery to that route is not done count, and an event not yet looked at
 * counts too (it may match the route). The containment test is served by the body's GIN index.
 */
export async function findOrderingHead(
  client: postgres.Sql,
  eventRowId: string,
  key: OrderingKeyValue,
  routeId?: string,
): Promise<OrderingHead | undefined> {
  // Containment finds the candidates through the index; the path comparison makes it equality (an
  // array or object contains more than it equals).
  const document = key.path.reduceRight<unknown>(
    (inner, token, index) => (key.inArray[index] === true ? [inner] : { [token]: inner }),
    key.value,
  )
  const [head] = await client<Array<{ id: string; event_id: string; status: EventStatus }>>`
    with me as (
      select source, coalesce(received_seq, 0) as seq, received_at from inbound_events where id = ${eventRowId})
    select o.id, o.event_id, o.status from inbound_events o, me
    where o.source = me.source and o.status in ('pending', 'processing', 'failed')
      and o.id <> ${eventRowId}
      and (o.received_seq < me.seq or (o.received_seq is null and o.received_at <= me.received_at))
      and hookledger_body_json(o.body) @> ${JSON.stringify(document)}::jsonb
      and hookledger_body_json(o.body) #> ${key.path as string[]}::text[] = ${JSON.stringify(key.value)}::jsonb
      ${
        routeId === undefined
          ? client``
          : client`
      and not exists (select 1 from event_routes r
                      where r.event_row_id = o.id and r.route_id = ${routeId} and r.status = 'done')
      and (not exists (select 1 from event_routes r where r.event_row_id = o.id)
           or exists (select 1 from event_routes r where r.event_row_id = o.id and r.route_id = ${routeId}))`
      }
    order by o.received_seq nulls first, o.received_at
    limit 1`
  return head === undefined ? undefined : { id: head.id, eventId: head.event_id, status: head.status }
}
