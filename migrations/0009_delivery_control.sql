-- Delivery control (issue 13): each event's per-route status, routes a 410 Gone disabled, and the
-- received order that ordering keys follow.
CREATE TYPE "public"."route_delivery_status" AS ENUM('pending', 'done', 'failed', 'waiting', 'paused');--> statement-breakpoint
CREATE SEQUENCE "public"."inbound_events_received_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
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
-- In two statements: a column added with a volatile default (nextval) rewrites the whole table under
-- an exclusive lock, while a nullable column and then a default for new rows change only the catalog.
-- Rows received before this migration keep NULL and order by received_at.
ALTER TABLE "inbound_events" ADD COLUMN "received_seq" bigint;--> statement-breakpoint
ALTER TABLE "inbound_events" ALTER COLUMN "received_seq" SET DEFAULT nextval('inbound_events_received_seq');--> statement-breakpoint
ALTER TABLE "event_routes" ADD CONSTRAINT "event_routes_event_row_id_inbound_events_id_fk" FOREIGN KEY ("event_row_id") REFERENCES "public"."inbound_events"("id") ON DELETE cascade ON UPDATE no action;