-- Per-route delivery status of each event (fan-out routes), and routes a destination disabled with 410 Gone.
CREATE TYPE "public"."route_delivery_status" AS ENUM('pending', 'done', 'failed', 'waiting', 'paused');--> statement-breakpoint
CREATE TABLE "disabled_routes" (
	"source" text NOT NULL,
	"route_id" text NOT NULL,
	"reason" text NOT NULL,
	"disabled_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "disabled_routes_source_route_id_pk" PRIMARY KEY("source","route_id")
);
--> statement-breakpoint
CREATE TABLE "event_routes" (
	"event_row_id" uuid NOT NULL,
	"route_id" text NOT NULL,
	"status" "route_delivery_status" NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"last_error" text,
	"response_status" integer,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "event_routes_event_row_id_route_id_pk" PRIMARY KEY("event_row_id","route_id")
);
--> statement-breakpoint
ALTER TABLE "event_routes" ADD CONSTRAINT "event_routes_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;