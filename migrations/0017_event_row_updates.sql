-- An inbound_events row is written once and rewritten three times (the enqueue mark, the lease, DONE),
-- each a new version of the whole row, the ~1 KB body included. A new version written on the page of
-- the old one is logged as the bytes that differ only (the body, before status, is left out); on
-- another page it is logged whole. At the default fillfactor of 100 the intake fills each page, so
-- every update moved the row: half of each page kept free for them halves the table's WAL per event
-- (npx tsx bench/per-event-cost.ts; 70 saved half as much, 30 no more than 50). The price is a heap
-- about twice as big for the same rows. New pages only: pages written before keep their fill.
-- toast_tuple_target would not take the body out of line: Postgres toasts only rows over ~2 KB.
ALTER TABLE "inbound_events" SET (fillfactor = 50);
