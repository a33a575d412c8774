-- Rows claimed by a backfill pass were authenticated by the provider's API answering a list call,
-- not by a signature: the column says which, for the admin page and for the claim, which compares a
-- webhook's bytes with a backfilled row's by event id only (the two are different renderings). The
-- constant default makes this a catalogue-only change, however many rows the ledger holds.
ALTER TABLE "inbound_events" ADD COLUMN "origin" text DEFAULT 'webhook' NOT NULL;
--> statement-breakpoint
ALTER TABLE "inbound_events" ADD CONSTRAINT "inbound_events_origin_check" CHECK ("origin" in ('webhook', 'backfill')) NOT VALID;
--> statement-breakpoint
CREATE TABLE "backfill_cursors" (
	"source" text PRIMARY KEY NOT NULL,
	"watermark" timestamp (3) with time zone,
	"sweep_since" timestamp (3) with time zone,
	"sweep_started_at" timestamp (3) with time zone,
	"sweep_resume" text,
	"lease_token" uuid,
	"lease_until" timestamp (3) with time zone,
	"last_pass_at" timestamp (3) with time zone,
	"last_error" text,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "backfill_redeliveries" (
	"source" text NOT NULL,
	"guid" text NOT NULL,
	"delivery_id" text NOT NULL,
	"event" text,
	"requested_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "backfill_redeliveries_source_guid_uq" ON "backfill_redeliveries" USING btree ("source","guid");
