-- The body moves out of inbound_events, whose row every status change rewrites, into
-- inbound_event_payloads, written once by the claim and never updated: every event has its row there
-- now, the exact bytes, where until now the table held the body parsed as jsonb (for the payload
-- search) beside a second copy of the bytes in inbound_events. The search's GIN index becomes an
-- expression on the bytes, computed once since the row is never updated. Per forwarded event this
-- writes the body once instead of twice, and the row the lease and the settle rewrite is less than
-- half its size (~0.5 KB against ~1.25 KB with a 750-byte body). Copying every body runs with the service stopped, as migrations 0018 and 0019.
--
-- A period a retention pass left half dropped (a table detached, or its detach pending) would keep
-- the old columns, where ALTER TABLE on the parent does not reach: first finished as the partition
-- keeper would (src/db/ledger-periods.ts dropPeriod), dropped when its events are all DONE, attached
-- back otherwise.
DO $$
DECLARE
  period record;
  t text;
  unfinished boolean;
BEGIN
  FOR period IN
    SELECT suffix FROM ledger_periods l
    WHERE EXISTS (
      SELECT 1 FROM unnest(hookledger_ledger_tables()) AS tables(name)
      WHERE to_regclass(tables.name || '_' || l.suffix) IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM pg_inherits i
                        WHERE i.inhrelid = to_regclass(tables.name || '_' || l.suffix) AND NOT i.inhdetachpending))
  LOOP
    unfinished := false;
    IF to_regclass('inbound_events_' || period.suffix) IS NOT NULL THEN
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status <> ''done'')', 'inbound_events_' || period.suffix)
        INTO unfinished;
    END IF;
    IF NOT unfinished THEN
      FOREACH t IN ARRAY (SELECT array_agg(name ORDER BY n DESC) FROM unnest(hookledger_ledger_tables())
                          WITH ORDINALITY AS tables(name, n)) LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I', t || '_' || period.suffix);
      END LOOP;
      DELETE FROM ledger_periods WHERE suffix = period.suffix;
    ELSIF EXISTS (SELECT 1 FROM unnest(hookledger_ledger_tables()) AS tables(name)
                  JOIN pg_inherits i ON i.inhrelid = to_regclass(tables.name || '_' || period.suffix)
                  WHERE i.inhdetachpending) THEN
      RAISE EXCEPTION 'ledger period % is half detached and holds events that are not DONE', period.suffix
        USING HINT = 'run ALTER TABLE <table> DETACH PARTITION <table>_' || period.suffix ||
                     ' FINALIZE for each table DETACH PENDING, then migrate again';
    ELSE
      PERFORM hookledger_attach_ledger_period(period.suffix);
    END IF;
  END LOOP;
END $$;--> statement-breakpoint
DROP INDEX "inbound_event_payloads_body_idx";--> statement-breakpoint
-- The jsonb copies go: each is parsed again from the bytes by the index below.
TRUNCATE "inbound_event_payloads";--> statement-breakpoint
ALTER TABLE "inbound_event_payloads" DROP COLUMN "body";--> statement-breakpoint
ALTER TABLE "inbound_event_payloads" ADD COLUMN "body" bytea NOT NULL;--> statement-breakpoint
INSERT INTO "inbound_event_payloads" ("event_row_id", "body") SELECT "id", "body" FROM "inbound_events";--> statement-breakpoint
ALTER TABLE "inbound_events" DROP COLUMN "body";--> statement-breakpoint
CREATE INDEX "inbound_event_payloads_body_idx" ON "inbound_event_payloads" USING gin (hookledger_body_json("body") jsonb_path_ops);
