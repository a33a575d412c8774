\timing on
\echo -- event id, naive (no index leads with event_id)
explain (analyze, costs off, summary) select id from inbound_events where event_id = 'evt_0000500000';
\echo -- event id, one probe of the (source, event_id) unique index per distinct source (loose scan)
explain (analyze, costs off, summary)
with recursive sources as (
  (select source from inbound_events order by source limit 1)
  union all
  select (select e.source from inbound_events e where e.source > s.source order by e.source limit 1)
  from sources s where s.source is not null
)
select id from inbound_events
where source in (select source from sources where source is not null) and event_id = 'evt_0000500000'
order by received_at desc, id desc limit 51;
\echo -- payload: data.object.customer = cus_123 (20 rows match)
explain (analyze, costs off, summary) select id from inbound_events
where id in (select event_row_id from inbound_event_payloads
  where hookledger_body_json(body) @> '{"data":{"object":{"customer":"cus_123"}}}' and hookledger_body_json(body) #> '{data,object,customer}' = '"cus_123"')
order by received_at desc, id desc limit 51;
\echo -- payload: data.object.metadata.order = ord_777 (1 row)
explain (analyze, costs off, summary) select id from inbound_events
where id in (select event_row_id from inbound_event_payloads
  where hookledger_body_json(body) @> '{"data":{"object":{"metadata":{"order":"ord_777"}}}}' and hookledger_body_json(body) #> '{data,object,metadata,order}' = '"ord_777"')
order by received_at desc, id desc limit 51;
\echo -- payload: type = invoice.paid (250 000 rows match; first page)
explain (analyze, costs off, summary) select id from inbound_events
where id in (select event_row_id from inbound_event_payloads
  where hookledger_body_json(body) @> '{"type":"invoice.paid"}' and hookledger_body_json(body) #> '{type}' = '"invoice.paid"')
order by received_at desc, id desc limit 51;
\echo -- overview: deliveries per minute by source and status, last hour
explain (analyze, costs off, summary)
select source, status, date_bin('60 seconds', received_at, now() - interval '1 hour') as bucket, count(*)
from inbound_events where received_at >= now() - interval '1 hour' and received_at < now()
group by 1, 2, 3;
\echo -- overview: per 15 minutes, last day
explain (analyze, costs off, summary)
select source, status, date_bin('900 seconds', received_at, now() - interval '1 day') as bucket, count(*)
from inbound_events where received_at >= now() - interval '1 day' and received_at < now()
group by 1, 2, 3;
\echo -- overview: latency p50/p99 and FAILED per source, last day
explain (analyze, costs off, summary)
select source, count(*) filter (where status = 'failed') as failed,
  percentile_cont(array[0.5, 0.99]) within group (order by extract(epoch from processed_at - received_at))
    filter (where processed_at is not null) as latency
from inbound_events where received_at >= now() - interval '1 day' and received_at < now()
group by grouping sets ((source), ());
