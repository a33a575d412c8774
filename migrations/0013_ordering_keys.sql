-- Each ordered event's key, per scope: the source's own orderingKey (route_id '') and each route's.
-- The head lookup ("the oldest unfinished event of this key before me") used to test every earlier
-- unfinished event of the source with a containment on its parsed body, with no index since 0005
-- moved the body GIN index off inbound_events: 11.6 ms per check with 800 events held. Here it is
-- one probe of the partial index below. key_hash is sha256 of the pointer and the RFC 8785 JSON of
-- the value there (src/delivery/ordering.ts), written with the claim; seq is the event's
-- received_seq (for events claimed before 0009, a negative number in received_at order). held goes
-- false once the event is done for the scope, so the index holds only the keys still in line.
CREATE TABLE "event_ordering_keys" (
	"event_row_id" uuid NOT NULL,
	"route_id" text NOT NULL,
	"source" text NOT NULL,
	"key_hash" bytea NOT NULL,
	"seq" bigint NOT NULL,
	"held" boolean DEFAULT true NOT NULL,
	CONSTRAINT "event_ordering_keys_event_row_id_route_id_pk" PRIMARY KEY("event_row_id","route_id")
);
--> statement-breakpoint
ALTER TABLE "event_ordering_keys" ADD CONSTRAINT "event_ordering_keys_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;
--> statement-breakpoint
CREATE INDEX "event_ordering_keys_line_idx" ON "event_ordering_keys" USING btree ("source","route_id","key_hash","seq") WHERE "held";
