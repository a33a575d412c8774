-- The code of the error that stopped a source's last backfill pass (src/backfill/errors.ts), so the
-- backfillStuck alert finds a stuck sweep without parsing last_error's text. Null after a pass that
-- finished, and for an unexpected fault.
ALTER TABLE "backfill_cursors" ADD COLUMN "last_error_code" text;--> statement-breakpoint
-- inbound_conflicts is pruned by age like every other table (src/db/retention.ts): this index serves
-- the sweep's range on received_at.
CREATE INDEX "inbound_conflicts_received_idx" ON "inbound_conflicts" USING btree ("received_at");
