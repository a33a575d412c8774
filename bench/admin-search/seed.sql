-- A million-row ledger for measuring the admin page's search and overview queries (throwaway database).
-- 30 days of deliveries from 5 sources; ~700-byte Stripe-like JSON bodies; 50 000 distinct customers.
with seeded as (
select
  i,
  (array['stripe','github','shopify','acme','twilio'])[1 + i % 5] as source,
  'evt_' || lpad(i::text, 10, '0') as event_id,
  (array['invoice.paid','invoice.created','customer.updated','charge.succeeded'])[1 + i % 4] as event_type,
  md5(i::text) || md5((i + 1)::text) as payload_hash,
  convert_to(json_build_object(
    'id', 'evt_' || lpad(i::text, 10, '0'),
    'type', (array['invoice.paid','invoice.created','customer.updated','charge.succeeded'])[1 + i % 4],
    'created', 1764000000 + i,
    'livemode', false,
    'data', json_build_object('object', json_build_object(
      'id', 'in_' || md5(i::text),
      'object', 'invoice',
      'customer', 'cus_' || (i % 50000),
      'amount_due', i % 10000,
      'currency', 'usd',
      'status', 'paid',
      'lines', json_build_array(
        json_build_object('id', 'il_' || md5((i * 7)::text), 'amount', i % 500, 'description', 'Pro plan'),
        json_build_object('id', 'il_' || md5((i * 13)::text), 'amount', i % 300, 'description', 'Seats')
      ),
      'metadata', json_build_object('order', 'ord_' || i, 'region', 'eu-west')
    ))
  )::text, 'UTF8') as body,
  '{"content-type":"application/json","webhook-id":"x","webhook-timestamp":"1764000000"}'::jsonb as headers,
  (case when i % 50 = 0 then 'failed' else 'done' end)::event_status as status,
  1 as attempts,
  now() - (i * interval '2592 milliseconds') as received_at,
  now() - (i * interval '2592 milliseconds') as enqueued_at,
  now() - (i * interval '2592 milliseconds') + ((20 + (i::bigint * 7919) % 400) * interval '1 millisecond')
    as processed_at,
  now() as updated_at
from generate_series(1, 1000000) as i),
inserted as (
insert into inbound_events (id, source, event_id, event_type, payload_hash, headers, status, attempts,
  received_at, enqueued_at, processed_at, updated_at)
select hookledger_uuid_v7(received_at), source, event_id, event_type, payload_hash, headers, status, attempts,
  received_at, enqueued_at, processed_at, updated_at
from seeded
returning id, event_id)
-- The bytes, as the claim writes them (src/db/claims.ts).
insert into inbound_event_payloads (event_row_id, body)
select inserted.id, seeded.body from inserted join seeded using (event_id);
vacuum analyze inbound_events;
vacuum analyze inbound_event_payloads;
