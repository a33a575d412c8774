-- The inbound ledger, partitioned by time (README "A ledger partitioned by time").
--
-- inbound_events and the five tables that grow with it are partitioned by RANGE of the row id, and
-- a row id is now a time-ordered UUID (version 7: its first 48 bits are the milliseconds of its
-- claim). A lookup by id therefore reads one partition, the foreign keys of every table stay on the
-- row id, and one period's rows of all six tables sit in six partitions that retention drops
-- together (src/db/ledger-periods.ts), instead of deleting row by row.
--
-- A unique index of a partitioned table must hold its partition key, so (source, event_id) can no
-- longer be unique on inbound_events. The claim's arbiter moves to inbound_event_keys: one narrow
-- row per claimed event, partitioned into key generations of `retention.dedupWindowDays` each, kept
-- for at least that window after the claim whether or not the event's own partition is still there
-- (src/db/claims.ts says how a claim meets an earlier copy in another generation).
--
-- Existing rows are copied under new ids made from their received_at (a random UUID of version 4
-- says nothing about its time); attempts, replays, routes, ordering keys, payloads and evidence
-- follow their events, and every event not yet DONE goes back to the relay (its old queue job names
-- an id that no longer exists). Run it with the service stopped: it rewrites the whole ledger in one
-- transaction.

-- No JIT for this database's sessions. A partitioned table's own statistics are never gathered by
-- autovacuum, so the planner cannot tell that an id is unique across partitions and estimates a
-- batch's 64 rows as tens of thousands; past jit_above_cost it then compiles every worker statement,
-- some 300 ms of CPU each, for statements that run in a few milliseconds. None of the ledger's
-- statements gains from JIT. Only the database's owner may set this: anyone else is told, and
-- `hookledger doctor` reports postgres.jit_on.
DO $$
BEGIN
  EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'JIT stays on for this database: only its owner can run ALTER DATABASE % SET jit = off', current_database();
END $$;--> statement-breakpoint

-- A version 7 UUID of the time `at`, with 74 random bits.
CREATE FUNCTION hookledger_uuid_v7(at timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    PLACING substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
    52, 1), 53, 1), 'hex')::uuid
$$;--> statement-breakpoint

-- The smallest version 7 UUID of the time `at`: a partition bound.
CREATE FUNCTION hookledger_uuid_v7_bound(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT encode(overlay('\x00000000000000000000000000000000'::bytea
    PLACING substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid
$$;--> statement-breakpoint

-- Every period of the ledger: its six partitions are named <table>_<suffix>.
CREATE TABLE "ledger_periods" (
  "starts" timestamp(3) with time zone PRIMARY KEY,
  "ends" timestamp(3) with time zone NOT NULL,
  "suffix" text NOT NULL UNIQUE,
  CONSTRAINT "ledger_periods_order_check" CHECK ("ends" > "starts")
);--> statement-breakpoint

-- Every key generation of inbound_event_keys: its partition is inbound_event_keys_<suffix>.
CREATE TABLE "inbound_key_generations" (
  "starts" timestamp(3) with time zone PRIMARY KEY,
  "ends" timestamp(3) with time zone NOT NULL,
  "suffix" text NOT NULL UNIQUE,
  CONSTRAINT "inbound_key_generations_order_check" CHECK ("ends" > "starts")
);--> statement-breakpoint

ALTER TABLE "inbound_events" RENAME TO "inbound_events_unpartitioned";--> statement-breakpoint
ALTER TABLE "inbound_event_payloads" RENAME TO "inbound_event_payloads_unpartitioned";--> statement-breakpoint
ALTER TABLE "event_attempts" RENAME TO "event_attempts_unpartitioned";--> statement-breakpoint
ALTER TABLE "event_replays" RENAME TO "event_replays_unpartitioned";--> statement-breakpoint
ALTER TABLE "event_routes" RENAME TO "event_routes_unpartitioned";--> statement-breakpoint
ALTER TABLE "event_ordering_keys" RENAME TO "event_ordering_keys_unpartitioned";--> statement-breakpoint
-- The old tables' constraints and indexes keep their names until the tables go, below; the new
-- tables take the same names, so rename the old ones out of the way first.
ALTER TABLE "inbound_events_unpartitioned" RENAME CONSTRAINT "inbound_events_pkey" TO "inbound_events_unpartitioned_pkey";--> statement-breakpoint
ALTER TABLE "inbound_events_unpartitioned" RENAME CONSTRAINT "inbound_events_origin_check" TO "inbound_events_unpartitioned_origin_check";--> statement-breakpoint
ALTER INDEX "inbound_events_status_received_id_idx" RENAME TO "inbound_events_unpartitioned_status_idx";--> statement-breakpoint
ALTER INDEX "inbound_events_received_overview_idx" RENAME TO "inbound_events_unpartitioned_overview_idx";--> statement-breakpoint
ALTER INDEX "inbound_events_unqueued_idx" RENAME TO "inbound_events_unpartitioned_unqueued_idx";--> statement-breakpoint
ALTER TABLE "inbound_event_payloads_unpartitioned" RENAME CONSTRAINT "inbound_event_payloads_pkey" TO "inbound_event_payloads_unpartitioned_pkey";--> statement-breakpoint
ALTER INDEX "inbound_event_payloads_body_idx" RENAME TO "inbound_event_payloads_unpartitioned_body_idx";--> statement-breakpoint
ALTER TABLE "event_attempts_unpartitioned" RENAME CONSTRAINT "event_attempts_pkey" TO "event_attempts_unpartitioned_pkey";--> statement-breakpoint
ALTER INDEX "event_attempts_event_idx" RENAME TO "event_attempts_unpartitioned_event_idx";--> statement-breakpoint
ALTER TABLE "event_replays_unpartitioned" RENAME CONSTRAINT "event_replays_pkey" TO "event_replays_unpartitioned_pkey";--> statement-breakpoint
ALTER INDEX "event_replays_event_idx" RENAME TO "event_replays_unpartitioned_event_idx";--> statement-breakpoint
ALTER TABLE "event_routes_unpartitioned" RENAME CONSTRAINT "event_routes_event_row_id_route_id_pk" TO "event_routes_unpartitioned_pk";--> statement-breakpoint
ALTER TABLE "event_ordering_keys_unpartitioned" RENAME CONSTRAINT "event_ordering_keys_event_row_id_route_id_pk" TO "event_ordering_keys_unpartitioned_pk";--> statement-breakpoint
ALTER INDEX "event_ordering_keys_line_idx" RENAME TO "event_ordering_keys_unpartitioned_line_idx";--> statement-breakpoint

CREATE TABLE "inbound_events" (
  "id" uuid DEFAULT hookledger_uuid_v7(now()) NOT NULL,
  "source" text NOT NULL,
  "event_id" text NOT NULL,
  "event_type" text,
  "payload_hash" text NOT NULL,
  "body" bytea NOT NULL,
  "headers" jsonb NOT NULL,
  "status" "event_status" DEFAULT 'pending' NOT NULL,
  "attempts" integer DEFAULT 0 NOT NULL,
  "last_error" text,
  "received_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
  "enqueued_at" timestamp(3) with time zone,
  "next_attempt_at" timestamp(3) with time zone,
  "processed_at" timestamp(3) with time zone,
  "lease_token" uuid,
  "lease_until" timestamp(3) with time zone,
  "updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
  "replays" integer DEFAULT 0 NOT NULL,
  "body_key" text,
  "origin" text DEFAULT 'webhook' NOT NULL,
  "received_seq" bigint DEFAULT nextval('inbound_events_received_seq'),
  "job_id" text,
  "trace_parent" text,
  CONSTRAINT "inbound_events_pkey" PRIMARY KEY ("id"),
  CONSTRAINT "inbound_events_origin_check" CHECK ("origin" in ('webhook', 'backfill'))
) PARTITION BY RANGE ("id");--> statement-breakpoint
-- Not unique (inbound_event_keys is the arbiter): the admin page's and the backfill's lookups by id.
CREATE INDEX "inbound_events_source_event_id_idx" ON "inbound_events" USING btree ("source","event_id");--> statement-breakpoint
CREATE INDEX "inbound_events_status_received_id_idx" ON "inbound_events" USING btree ("status","received_at","id");--> statement-breakpoint
CREATE INDEX "inbound_events_received_overview_idx" ON "inbound_events" USING btree ("received_at","id","source","status","processed_at");--> statement-breakpoint
CREATE INDEX "inbound_events_unqueued_idx" ON "inbound_events" USING btree ("received_at") WHERE "enqueued_at" is null and "status" = 'pending';--> statement-breakpoint

CREATE TABLE "inbound_event_payloads" (
  "event_row_id" uuid NOT NULL,
  "body" jsonb NOT NULL,
  CONSTRAINT "inbound_event_payloads_pkey" PRIMARY KEY ("event_row_id")
) PARTITION BY RANGE ("event_row_id");--> statement-breakpoint
CREATE INDEX "inbound_event_payloads_body_idx" ON "inbound_event_payloads" USING gin ("body" jsonb_path_ops);--> statement-breakpoint

CREATE TABLE "event_attempts" (
  "id" bigint DEFAULT nextval('event_attempts_id_seq') NOT NULL,
  "event_row_id" uuid NOT NULL,
  "attempt" integer NOT NULL,
  "outcome" text NOT NULL,
  "error" text,
  "response_status" integer,
  "response_excerpt" text,
  "started_at" timestamp(3) with time zone NOT NULL,
  "finished_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
  "replay" integer DEFAULT 0 NOT NULL,
  CONSTRAINT "event_attempts_event_row_id_id_pk" PRIMARY KEY ("event_row_id","id")
) PARTITION BY RANGE ("event_row_id");--> statement-breakpoint
ALTER SEQUENCE "event_attempts_id_seq" OWNED BY "event_attempts"."id";--> statement-breakpoint
CREATE INDEX "event_attempts_event_idx" ON "event_attempts" USING btree ("event_row_id","attempt");--> statement-breakpoint

CREATE TABLE "event_replays" (
  "id" bigint DEFAULT nextval('event_replays_id_seq') NOT NULL,
  "event_row_id" uuid NOT NULL,
  "replay" integer NOT NULL,
  "by" text NOT NULL,
  "previous_attempts" integer NOT NULL,
  "previous_error" text,
  "at" timestamp(3) with time zone DEFAULT now() NOT NULL,
  CONSTRAINT "event_replays_event_row_id_id_pk" PRIMARY KEY ("event_row_id","id")
) PARTITION BY RANGE ("event_row_id");--> statement-breakpoint
ALTER SEQUENCE "event_replays_id_seq" OWNED BY "event_replays"."id";--> statement-breakpoint
CREATE INDEX "event_replays_event_idx" ON "event_replays" USING btree ("event_row_id","replay");--> statement-breakpoint

CREATE TABLE "event_routes" (
  "event_row_id" uuid NOT NULL,
  "route_id" text NOT NULL,
  "status" "route_delivery_status" NOT NULL,
  "attempts" integer DEFAULT 0 NOT NULL,
  "last_error" text,
  "response_status" integer,
  "updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
  CONSTRAINT "event_routes_event_row_id_route_id_pk" PRIMARY KEY ("event_row_id","route_id")
) PARTITION BY RANGE ("event_row_id");--> statement-breakpoint

CREATE TABLE "event_ordering_keys" (
  "event_row_id" uuid NOT NULL,
  "route_id" text NOT NULL,
  "source" text NOT NULL,
  "key_hash" bytea NOT NULL,
  "seq" bigint NOT NULL,
  "held" boolean DEFAULT true NOT NULL,
  CONSTRAINT "event_ordering_keys_event_row_id_route_id_pk" PRIMARY KEY ("event_row_id","route_id")
) PARTITION BY RANGE ("event_row_id");--> statement-breakpoint
CREATE INDEX "event_ordering_keys_line_idx" ON "event_ordering_keys" USING btree ("source","route_id","key_hash","seq") WHERE "held";--> statement-breakpoint

-- The claim's arbiter. (source, event_id) and (source, body_key) are unique within a generation;
-- the generation comes last in both indexes so that a claim's look into the other generations
-- descends on the key.
CREATE TABLE "inbound_event_keys" (
  "generation" timestamp(3) with time zone NOT NULL,
  "source" text NOT NULL,
  "event_id" text NOT NULL,
  "body_key" text,
  "event_row_id" uuid NOT NULL,
  "payload_hash" text NOT NULL,
  "origin" text NOT NULL
) PARTITION BY RANGE ("generation");--> statement-breakpoint
CREATE UNIQUE INDEX "inbound_event_keys_source_event_id_uq" ON "inbound_event_keys" USING btree ("source","event_id","generation");--> statement-breakpoint
CREATE UNIQUE INDEX "inbound_event_keys_source_body_key_uq" ON "inbound_event_keys" USING btree ("source","body_key","generation") WHERE "body_key" is not null;--> statement-breakpoint

-- The six tables of a period, events first.
CREATE FUNCTION hookledger_ledger_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['inbound_events', 'inbound_event_payloads', 'event_attempts', 'event_replays', 'event_routes',
               'event_ordering_keys']
$$;--> statement-breakpoint

-- Attaches those of a period's six tables that are not attached (made, or detached by a drop that
-- found them still owed work). ATTACH takes a SHARE UPDATE EXCLUSIVE lock on the parent, which claims
-- and workers do not wait for; CREATE TABLE … PARTITION OF and DROP of an attached partition would
-- take an ACCESS EXCLUSIVE one, and queue every claim behind the longest running handler.
CREATE FUNCTION hookledger_attach_ledger_period(p_suffix text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  period record;
  t text;
BEGIN
  SELECT * INTO STRICT period FROM ledger_periods WHERE suffix = p_suffix;
  FOREACH t IN ARRAY hookledger_ledger_tables() LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(t || '_' || p_suffix)) THEN
      EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', t, t || '_' || p_suffix,
        hookledger_uuid_v7_bound(period.starts), hookledger_uuid_v7_bound(period.ends));
    END IF;
  END LOOP;
END $$;--> statement-breakpoint

-- One period: the six tables of [starts, ends), each child's foreign key on its own period's events
-- table (a key on the parent would make dropping a partition check every other one), attached.
CREATE FUNCTION hookledger_add_ledger_period(p_starts timestamptz, p_ends timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  suffix text := to_char(p_starts AT TIME ZONE 'UTC', 'YYYYMMDD');
  t text;
BEGIN
  INSERT INTO ledger_periods (starts, ends, suffix) VALUES (p_starts, p_ends, suffix);
  FOREACH t IN ARRAY hookledger_ledger_tables() LOOP
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%s',
      t || '_' || suffix, t, CASE WHEN t = 'inbound_events' THEN ' WITH (fillfactor = 50)' ELSE '' END);
  END LOOP;
  PERFORM hookledger_attach_ledger_period(suffix);
  FOREACH t IN ARRAY (hookledger_ledger_tables())[2:] LOOP
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (event_row_id) REFERENCES %I (id) ON DELETE CASCADE',
      t || '_' || suffix, t || '_' || suffix || '_event_fk', 'inbound_events_' || suffix);
  END LOOP;
  RETURN suffix;
END $$;--> statement-breakpoint

CREATE FUNCTION hookledger_add_key_generation(p_starts timestamptz, p_ends timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  suffix text := to_char(p_starts AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
  INSERT INTO inbound_key_generations (starts, ends, suffix) VALUES (p_starts, p_ends, suffix);
  -- Made, then attached: as for periods, no lock that claims wait for.
  EXECUTE format('CREATE TABLE %I (LIKE inbound_event_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
    'inbound_event_keys_' || suffix);
  EXECUTE format('ALTER TABLE inbound_event_keys ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
    'inbound_event_keys_' || suffix, p_starts, p_ends);
  RETURN suffix;
END $$;--> statement-breakpoint

-- Daily periods from the oldest row kept to two days ahead, and one key generation of 30 days from
-- today: the service's partition keeper extends both as its config says (retention.partitionPeriod,
-- retention.dedupWindowDays) before it takes a request.
SELECT hookledger_add_ledger_period(day, day + interval '1 day')
FROM generate_series(
  date_trunc('day', least(now(), (SELECT min(received_at) FROM inbound_events_unpartitioned)), 'UTC'),
  date_trunc('day', now(), 'UTC') + interval '2 days',
  interval '1 day') AS day;--> statement-breakpoint
SELECT hookledger_add_key_generation(date_trunc('day', now(), 'UTC'), date_trunc('day', now(), 'UTC') + interval '30 days');--> statement-breakpoint

CREATE TEMPORARY TABLE "upgraded_ids" ON COMMIT DROP AS
  SELECT id AS old_id, hookledger_uuid_v7(received_at) AS new_id FROM inbound_events_unpartitioned;--> statement-breakpoint
CREATE UNIQUE INDEX ON "upgraded_ids" ("old_id");--> statement-breakpoint

INSERT INTO "inbound_events" (id, source, event_id, event_type, payload_hash, body, headers, status, attempts,
  last_error, received_at, enqueued_at, next_attempt_at, processed_at, lease_token, lease_until, updated_at,
  replays, body_key, origin, received_seq, job_id, trace_parent)
SELECT u.new_id, e.source, e.event_id, e.event_type, e.payload_hash, e.body, e.headers,
  CASE WHEN e.status = 'processing' THEN 'pending'::event_status ELSE e.status END, e.attempts,
  e.last_error, e.received_at,
  CASE WHEN e.status IN ('pending', 'processing') THEN NULL ELSE e.enqueued_at END,
  e.next_attempt_at, e.processed_at, NULL, NULL, e.updated_at, e.replays, e.body_key, e.origin, e.received_seq,
  CASE WHEN e.status IN ('pending', 'processing') THEN NULL ELSE e.job_id END, e.trace_parent
FROM inbound_events_unpartitioned e JOIN upgraded_ids u ON u.old_id = e.id;--> statement-breakpoint
INSERT INTO "inbound_event_keys" (generation, source, event_id, body_key, event_row_id, payload_hash, origin)
SELECT (SELECT starts FROM inbound_key_generations), e.source, e.event_id, e.body_key, u.new_id, e.payload_hash, e.origin
FROM inbound_events_unpartitioned e JOIN upgraded_ids u ON u.old_id = e.id;--> statement-breakpoint
INSERT INTO "inbound_event_payloads" (event_row_id, body)
SELECT u.new_id, p.body FROM inbound_event_payloads_unpartitioned p JOIN upgraded_ids u ON u.old_id = p.event_row_id;--> statement-breakpoint
INSERT INTO "event_attempts" (id, event_row_id, attempt, outcome, error, response_status, response_excerpt,
  started_at, finished_at, replay)
SELECT a.id, u.new_id, a.attempt, a.outcome, a.error, a.response_status, a.response_excerpt, a.started_at,
  a.finished_at, a.replay
FROM event_attempts_unpartitioned a JOIN upgraded_ids u ON u.old_id = a.event_row_id;--> statement-breakpoint
INSERT INTO "event_replays" (id, event_row_id, replay, by, previous_attempts, previous_error, at)
SELECT r.id, u.new_id, r.replay, r.by, r.previous_attempts, r.previous_error, r.at
FROM event_replays_unpartitioned r JOIN upgraded_ids u ON u.old_id = r.event_row_id;--> statement-breakpoint
INSERT INTO "event_routes" (event_row_id, route_id, status, attempts, last_error, response_status, updated_at)
SELECT u.new_id, r.route_id, r.status, r.attempts, r.last_error, r.response_status, r.updated_at
FROM event_routes_unpartitioned r JOIN upgraded_ids u ON u.old_id = r.event_row_id;--> statement-breakpoint
INSERT INTO "event_ordering_keys" (event_row_id, route_id, source, key_hash, seq, held)
SELECT u.new_id, k.route_id, k.source, k.key_hash, k.seq, k.held
FROM event_ordering_keys_unpartitioned k JOIN upgraded_ids u ON u.old_id = k.event_row_id;--> statement-breakpoint
UPDATE "operation_evidence" v SET event_row_id = u.new_id FROM upgraded_ids u WHERE u.old_id = v.event_row_id;--> statement-breakpoint

DROP TABLE "inbound_event_payloads_unpartitioned", "event_attempts_unpartitioned", "event_replays_unpartitioned",
  "event_routes_unpartitioned", "event_ordering_keys_unpartitioned", "inbound_events_unpartitioned";
