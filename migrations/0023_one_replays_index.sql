-- event_replays had, beside its primary key (event_row_id, id), an index on (event_row_id, replay):
-- an event's replays are read by its id alone, a handful of rows sorted after the read, which the key
-- serves, so every replay wrote one index entry for nothing (as event_attempts' second index, which
-- migration 0021 dropped). Dropping a partitioned index drops it from every attached period.
DROP INDEX "event_replays_event_idx";
