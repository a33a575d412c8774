-- Four index entries fewer for every forwarded event: one index less on each table a forward adds
-- rows to, where two served the reads one serves.
--   operation_audit and operation_attempts each kept a primary key on their bigserial id, which no
--   statement reads by, beside the index every read goes through: an operation's audit by
--   (operation_id, id), its attempts by the unique (operation_id, attempt). That index is now the
--   primary key; the id stays a column (the audit's order within an operation). The attempts' unique
--   index becomes their key as it is; the audit's was not unique and is built again, which locks
--   operation_audit against writes for the build: run with the service stopped, as migration 0018.
--   event_attempts is read by event only (an event's attempts, a handful of rows sorted after the
--   read): its primary key (event_row_id, id) serves that, and the index on (event_row_id, attempt)
--   goes, from every period's partition with it.
ALTER TABLE "operation_audit" DROP CONSTRAINT "operation_audit_pkey";--> statement-breakpoint
DROP INDEX "operation_audit_operation_idx";--> statement-breakpoint
ALTER TABLE "operation_audit" ADD CONSTRAINT "operation_audit_operation_id_id_pk" PRIMARY KEY ("operation_id","id");--> statement-breakpoint
ALTER TABLE "operation_attempts" DROP CONSTRAINT "operation_attempts_pkey";--> statement-breakpoint
ALTER TABLE "operation_attempts" ADD CONSTRAINT "operation_attempts_operation_id_attempt_pk" PRIMARY KEY USING INDEX "operation_attempts_operation_attempt_uq";--> statement-breakpoint
DROP INDEX "event_attempts_event_idx";
