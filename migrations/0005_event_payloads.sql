-- The payload search's GIN index moves off inbound_events (see inboundEventPayloads in
-- src/db/schema.ts): an expression index there was computed again on every status update, and the
-- expression is a plpgsql function with an exception block (a subtransaction each call). Here the
-- body is parsed once, when the event is claimed, and the worker's updates never touch the index.
CREATE TABLE "inbound_event_payloads" (
	"event_row_id" uuid PRIMARY KEY NOT NULL,
	"body" jsonb NOT NULL
);
--> statement-breakpoint
ALTER TABLE "inbound_event_payloads" ADD CONSTRAINT "inbound_event_payloads_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;
--> statement-breakpoint
-- The rows already in the ledger, before the index exists (one bulk build instead of one insert
-- per row). On a big ledger this reads every body once: with the index build, ~45 s per million
-- ~900-byte bodies measured on a busy 2-core machine, holding off inserts meanwhile.
INSERT INTO "inbound_event_payloads" ("event_row_id", "body")
SELECT "id", "parsed" FROM "inbound_events", "hookledger_body_json"("body") AS "parsed" WHERE "parsed" IS NOT NULL;
--> statement-breakpoint
CREATE INDEX "inbound_event_payloads_body_idx" ON "inbound_event_payloads" USING gin ("body" jsonb_path_ops);
--> statement-breakpoint
DROP INDEX IF EXISTS "inbound_events_body_json_idx";
