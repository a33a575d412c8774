CREATE TABLE "event_replays" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"event_row_id" uuid NOT NULL,
	"replay" integer NOT NULL,
	"by" text NOT NULL,
	"previous_attempts" integer NOT NULL,
	"previous_error" text,
	"at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "event_attempts" ADD COLUMN "replay" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "inbound_events" ADD COLUMN "replays" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "event_replays" ADD CONSTRAINT "event_replays_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "event_replays_event_idx" ON "event_replays" USING btree ("event_row_id","replay");--> statement-breakpoint
CREATE INDEX "inbound_events_received_id_idx" ON "inbound_events" USING btree ("received_at","id");--> statement-breakpoint
CREATE INDEX "operations_operation_key_pattern_idx" ON "operations" USING btree ("operation_key" text_pattern_ops);