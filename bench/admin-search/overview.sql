-- The overview's two window queries exactly as src/db/overview-queries.ts sends them (last hour,
-- last day), on the million-row ledger. Run twice: the second run is the warm one a page view sees.
\timing on
\set hour_from '''now''::timestamptz - interval ''1 hour'''
select count(*) from (
  select source, status, date_bin('60 seconds'::interval, received_at, now() - interval '1 hour') as at, count(*)::int
  from inbound_events where received_at >= now() - interval '1 hour' and received_at < now() group by 1, 2, 3) q;
select count(*) from (
  select source, status, date_bin('900 seconds'::interval, received_at, now() - interval '1 day') as at, count(*)::int
  from inbound_events where received_at >= now() - interval '1 day' and received_at < now() group by 1, 2, 3) q;
select count(*) from (
  select source, count(*)::int as received,
    count(*) filter (where status = 'failed')::int as failed,
    count(*) filter (where status in ('pending', 'processing'))::int as in_flight,
    percentile_cont(0.5) within group (order by extract(epoch from processed_at - received_at) * 1000)
      filter (where processed_at is not null) as p50,
    percentile_cont(0.99) within group (order by extract(epoch from processed_at - received_at) * 1000)
      filter (where processed_at is not null) as p99
  from inbound_events where received_at >= now() - interval '1 day' and received_at < now()
  group by grouping sets ((source), ())) q;
