-- A million-row ledger for measuring the admin page's search and overview queries (throwaway database).
-- 30 days of deliveries from 5 sources; ~700-byte Stripe-like JSON bodies; 50 000 distinct customers.
insert into inbound_events (source, event_id, event_type, payload_hash, body, headers, status, attempts,
  received_at, enqueued_at, processed_at, updated_at)
select
  (array['stripe','github','shopify','acme','twilio'])[1 + i % 5],
  'evt_' || lpad(i::text, 10, '0'),
  (array['invoice.paid','invoice.created','customer.updated','charge.succeeded'])[1 + i % 4],
  md5(i::text) || md5((i + 1)::text),
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
  )::text, 'UTF8'),
  '{"content-type":"application/json","webhook-id":"x","webhook-timestamp":"1764000000"}'::jsonb,
  (case when i % 50 = 0 then 'failed' else 'done' end)::event_status,
  1,
  now() - (i * interval '2592 milliseconds'),
  now() - (i * interval '2592 milliseconds'),
  now() - (i * interval '2592 milliseconds') + ((20 + (i::bigint * 7919) % 400) * interval '1 millisecond'),
  now()
from generate_series(1, 1000000) as i;
-- The parsed bodies for the payload search, as the claim writes them (src/db/claims.ts).
insert into inbound_event_payloads (event_row_id, body)
select id, parsed from inbound_events, hookledger_body_json(body) as parsed where parsed is not null;
vacuum analyze inbound_events;
vacuum analyze inbound_event_payloads;
