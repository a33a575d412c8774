CREATE TYPE "public"."approval_status" AS ENUM('pending', 'decided');--> statement-breakpoint
CREATE TYPE "public"."attempt_status" AS ENUM('in_flight', 'succeeded', 'rejected', 'unknown', 'not_sent', 'compensated', 'undo_failed');--> statement-breakpoint
CREATE TYPE "public"."effect_class" AS ENUM('idempotent', 'compensable', 'irreversible');--> statement-breakpoint
CREATE TYPE "public"."operation_status" AS ENUM('in_progress', 'completed', 'compensated', 'needs_reconciliation', 'awaiting_approval', 'retry_approved', 'exhausted', 'failed', 'abandoned');--> statement-breakpoint
CREATE TABLE "approvals" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"operation_id" uuid NOT NULL,
	"action" text NOT NULL,
	"payload_hash" text NOT NULL,
	"reason" text NOT NULL,
	"evidence" jsonb,
	"proposed_action" text NOT NULL,
	"status" "approval_status" DEFAULT 'pending' NOT NULL,
	"decision" text,
	"decided_by" text,
	"decided_at" timestamp (3) with time zone,
	"decision_evidence" jsonb,
	"note" text,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "operation_attempts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"operation_id" uuid NOT NULL,
	"attempt" integer NOT NULL,
	"attempt_key" text NOT NULL,
	"status" "attempt_status" DEFAULT 'in_flight' NOT NULL,
	"undo_ref" jsonb,
	"error" text,
	"details" jsonb,
	"started_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE TABLE "operation_audit" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"operation_id" uuid NOT NULL,
	"operation_key" text NOT NULL,
	"event" text NOT NULL,
	"from_status" text,
	"to_status" text,
	"actor" text NOT NULL,
	"details" jsonb,
	"at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "operations" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"operation_key" text NOT NULL,
	"tool" text NOT NULL,
	"effect_class" "effect_class" NOT NULL,
	"payload_hash" text NOT NULL,
	"args" jsonb NOT NULL,
	"status" "operation_status" DEFAULT 'in_progress' NOT NULL,
	"lease_token" uuid,
	"lease_until" timestamp (3) with time zone,
	"attempts" integer DEFAULT 0 NOT NULL,
	"round_attempts" integer DEFAULT 0 NOT NULL,
	"result_json" jsonb,
	"downstream_id" text,
	"undo_ref" jsonb,
	"last_error" text,
	"evidence" jsonb,
	"reconcile_at" timestamp (3) with time zone,
	"run_id" text,
	"trace_id" text,
	"tool_call_id" text,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"completed_at" timestamp (3) with time zone
);
--> statement-breakpoint
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_operation_id_operations_id_fk" FOREIGN KEY ("operation_id") REFERENCES "public"."operations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "operation_attempts" ADD CONSTRAINT "operation_attempts_operation_id_operations_id_fk" FOREIGN KEY ("operation_id") REFERENCES "public"."operations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "approvals_one_pending_uq" ON "approvals" USING btree ("operation_id") WHERE "approvals"."status" = 'pending';--> statement-breakpoint
CREATE INDEX "approvals_status_created_idx" ON "approvals" USING btree ("status","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "operation_attempts_operation_attempt_uq" ON "operation_attempts" USING btree ("operation_id","attempt");--> statement-breakpoint
CREATE INDEX "operation_audit_operation_idx" ON "operation_audit" USING btree ("operation_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "operations_operation_key_uq" ON "operations" USING btree ("operation_key");--> statement-breakpoint
CREATE INDEX "operations_status_updated_idx" ON "operations" USING btree ("status","updated_at");--> statement-breakpoint
-- Hand-written (drizzle-kit does not model triggers): the audit is append-only, so a transition once
-- recorded can be neither rewritten nor erased, not even by a bug in the service.
CREATE FUNCTION "operation_audit_append_only"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'operation_audit is append-only';
END
$$;--> statement-breakpoint
CREATE TRIGGER "operation_audit_append_only" BEFORE UPDATE OR DELETE ON "operation_audit"
  FOR EACH ROW EXECUTE FUNCTION "operation_audit_append_only"();
