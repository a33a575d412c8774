-- A forward's operation row is written by its claim and rewritten once by its success, within
-- milliseconds; the rewrite is not HOT (status is in operations_status_updated_idx), but a new version
-- written on the old one's page is still logged as the bytes that differ, from status on, where on
-- another page it is logged whole, with a lock record before it. At the default fillfactor of 100 a
-- burst of claims fills each page, so most successes moved their row (0.5 to 0.7 of them in
-- bench/per-event-cost.ts). Half of each page kept free, as for inbound_events (migration 0017), and
-- a fifth of each operation_attempts page, whose update is HOT when its page has room (0.84 of them
-- were): 4,748 → 4,481 WAL bytes per event in a drain, 7,026 → 6,775 in the steady flow (page images
-- apart, 4,134 → 3,868 and 6,623 → 6,433). New pages only: pages written before keep their fill.
-- SET (fillfactor) takes a SHARE UPDATE EXCLUSIVE lock, which claims and settles do not wait for.
ALTER TABLE "operations" SET (fillfactor = 50);--> statement-breakpoint
ALTER TABLE "operation_attempts" SET (fillfactor = 80);
