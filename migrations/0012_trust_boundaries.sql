-- Trust boundaries (README "Trust model").
--
-- The agents' space: every key an agent names through /v1/operations is kept as 'agents/<key>', a
-- prefix nothing the service or in-process code may claim, so an agent can never claim, read or
-- settle a forward, a route delivery, an alert or a handler's step. Operations agents claimed before
-- this version move there; their attempts keep the idempotency keys already sent downstream. The
-- audit is append-only and keeps the key each entry was written under (operation_id links them).
UPDATE "operations" SET "operation_key" = 'agents/' || "operation_key"
WHERE "id" IN (SELECT "operation_id" FROM "operation_audit" WHERE "event" = 'claimed' AND "actor" = 'agent')
  AND "operation_key" NOT LIKE 'agents/%';--> statement-breakpoint
-- Evidence carries the scope of the rule that read it and when its event was received, so the settle
-- statement can refuse what the rule may not settle and what was received before the operation was
-- first claimed (such evidence cannot be about it). Rows kept from before have no scope: they never
-- apply (a rule without a scope is refused at start-up now).
ALTER TABLE "operation_evidence" ADD COLUMN "settles_tools" text[];--> statement-breakpoint
ALTER TABLE "operation_evidence" ADD COLUMN "settles_key_prefixes" text[];--> statement-breakpoint
ALTER TABLE "operation_evidence" ADD COLUMN "event_received_at" timestamp (3) with time zone;--> statement-breakpoint
-- Why a piece of evidence did not settle its operation, shown to the person who decides it.
ALTER TABLE "operation_evidence" ADD COLUMN "note" text;--> statement-breakpoint
ALTER TYPE "public"."evidence_status" ADD VALUE IF NOT EXISTS 'not_applicable';
