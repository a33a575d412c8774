-- The body as jsonb for the admin page's payload search. The bytes are kept as received (bytea); a
-- body that is not UTF-8 JSON (a form post, a binary payload) reads as NULL instead of failing the
-- INSERT that receives it: an index expression that throws would turn a delivery into a 500.
-- IMMUTABLE is true here: convert_from to the database's own fixed encoding and the jsonb parser
-- give the same answer for the same bytes forever. PARALLEL RESTRICTED: the EXCEPTION block opens a
-- subtransaction, which a parallel worker cannot.
CREATE OR REPLACE FUNCTION "hookledger_body_json"("body" bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL RESTRICTED AS $$
BEGIN
  RETURN convert_from("body", 'UTF8')::jsonb;
EXCEPTION WHEN others THEN
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- jsonb_path_ops: one hashed entry per leaf path, serving `@>` for any JSON path of any body.
-- IF NOT EXISTS: on a big ledger, build it beforehand with CREATE INDEX CONCURRENTLY (docs/admin.md),
-- since this statement holds off inserts while it builds (~4 min per million rows measured).
CREATE INDEX IF NOT EXISTS "inbound_events_body_json_idx" ON "inbound_events" USING gin ("hookledger_body_json"("body") jsonb_path_ops);
--> statement-breakpoint
-- The admin page's keyset paging reads (received_at, id); its overview also counts source, status
-- and latency over a time window. With them in the index, a day's window is read from the index
-- alone: 366 buffers instead of 15 915 for 44 000 rows (bench/admin-search/overview.sh). It replaces
-- the (received_at, id) index, so the receive path keeps the same number of indexes to write.
CREATE INDEX IF NOT EXISTS "inbound_events_received_overview_idx" ON "inbound_events" USING btree ("received_at","id","source","status","processed_at");
--> statement-breakpoint
DROP INDEX IF EXISTS "inbound_events_received_id_idx";
--> statement-breakpoint
CREATE TABLE "admin_sessions" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"revoked_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE INDEX "admin_sessions_expires_idx" ON "admin_sessions" USING btree ("expires_at");
