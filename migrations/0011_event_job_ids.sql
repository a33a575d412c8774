-- The job that carries each row, set when the row is first enqueued (src/queue/enqueuer.ts): a batch's
-- `evts-<uuid>` or the row's own `evt-<uuid>`. The relay's orphan pass asks the queue about this job
-- as well as the row's own, so rows waiting in a live batch job through a long backlog are not taken
-- for lost. Null for rows enqueued before this migration: those are checked under their own id only.
ALTER TABLE "inbound_events" ADD COLUMN "job_id" text;
