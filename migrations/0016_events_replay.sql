-- A bulk replay walks the FAILED rows of a filter in (received_at, id) order, a chunk per statement,
-- from where the last chunk stopped. With id in the index a chunk starts right after the last row:
-- rows received in the same instant (a batch claim, a seeding script) are no longer all re-read and
-- sorted by id at every chunk. The old (status, received_at) index is a prefix of this one.
CREATE INDEX "inbound_events_status_received_id_idx" ON "inbound_events" USING btree ("status","received_at","id");--> statement-breakpoint
DROP INDEX "inbound_events_status_received_idx";
