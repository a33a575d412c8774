CREATE TYPE "public"."event_status" AS ENUM('pending', 'processing', 'done', 'failed');--> statement-breakpoint
CREATE TABLE "deployment" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "event_attempts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"event_row_id" uuid NOT NULL,
	"attempt" integer NOT NULL,
	"outcome" text NOT NULL,
	"error" text,
	"response_status" integer,
	"response_excerpt" text,
	"started_at" timestamp (3) with time zone NOT NULL,
	"finished_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "inbound_conflicts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"source" text NOT NULL,
	"event_id" text NOT NULL,
	"payload_hash" text NOT NULL,
	"original_payload_hash" text NOT NULL,
	"received_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "inbound_events" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"source" text NOT NULL,
	"event_id" text NOT NULL,
	"event_type" text,
	"payload_hash" text NOT NULL,
	"body" "bytea" NOT NULL,
	"headers" jsonb NOT NULL,
	"status" "event_status" DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"last_error" text,
	"received_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"enqueued_at" timestamp (3) with time zone,
	"next_attempt_at" timestamp (3) with time zone,
	"processed_at" timestamp (3) with time zone,
	"lease_token" uuid,
	"lease_until" timestamp (3) with time zone,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "event_attempts" ADD CONSTRAINT "event_attempts_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "event_attempts_event_idx" ON "event_attempts" USING btree ("event_row_id","attempt");--> statement-breakpoint
CREATE INDEX "inbound_conflicts_source_event_idx" ON "inbound_conflicts" USING btree ("source","event_id");--> statement-breakpoint
CREATE UNIQUE INDEX "inbound_events_source_event_id_uq" ON "inbound_events" USING btree ("source","event_id");--> statement-breakpoint
CREATE INDEX "inbound_events_status_received_idx" ON "inbound_events" USING btree ("status","received_at");--> statement-breakpoint
CREATE INDEX "inbound_events_unqueued_idx" ON "inbound_events" USING btree ("received_at") WHERE "inbound_events"."enqueued_at" is null and "inbound_events"."status" = 'pending';--> statement-breakpoint
-- The deployment id is made once, with the database: api and worker processes of one deployment agree on it.
INSERT INTO "deployment" DEFAULT VALUES;