-- One index on operations.operation_key instead of two. The unique index (the claim's arbiter: ON
-- CONFLICT (operation_key) infers it) and the text_pattern_ops index (an event's operations by key
-- prefix, LIKE 'source:event:%', under a non-C collation) were two entries for every operation
-- written. A unique index with text_pattern_ops serves both: its equality is the default one, and
-- it answers the prefix. Building it locks operations against writes for the build: run with the
-- service stopped, as migration 0018.
CREATE UNIQUE INDEX "operations_operation_key_prefix_uq" ON "operations" USING btree ("operation_key" text_pattern_ops);--> statement-breakpoint
DROP INDEX "operations_operation_key_uq";--> statement-breakpoint
DROP INDEX "operations_operation_key_pattern_idx";--> statement-breakpoint
ALTER INDEX "operations_operation_key_prefix_uq" RENAME TO "operations_operation_key_uq";
