-- Inbound events that settle outbound operations (evidence rules, docs/closing-the-loop.md).
CREATE TYPE "public"."evidence_outcome" AS ENUM('succeeded', 'failed');--> statement-breakpoint
CREATE TYPE "public"."evidence_status" AS ENUM('pending', 'applied', 'superseded');--> statement-breakpoint
CREATE TABLE "operation_evidence" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"source" text NOT NULL,
	"event_id" text NOT NULL,
	"event_type" text,
	"event_row_id" uuid NOT NULL,
	"operation_key" text NOT NULL,
	"outcome" "evidence_outcome" NOT NULL,
	"downstream_id" text,
	"failure" text,
	"status" "evidence_status" DEFAULT 'pending' NOT NULL,
	"operation_id" uuid,
	"received_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE UNIQUE INDEX "operation_evidence_source_event_uq" ON "operation_evidence" USING btree ("source","event_id");--> statement-breakpoint
CREATE INDEX "operation_evidence_pending_key_idx" ON "operation_evidence" USING btree ("operation_key","id") WHERE "operation_evidence"."status" = 'pending';
