-- Retention of the outbound ledger (src/db/retention.ts): settled operations are deleted once they
-- are older than `retention.operationDays`, and their audit entries with them. The audit stays
-- append-only for everything else: no entry may ever be rewritten, and only a transaction that says
-- it is the retention sweep (a transaction-local setting) may delete entries.
CREATE OR REPLACE FUNCTION "operation_audit_append_only"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND current_setting('hookledger.retention_sweep', true) = 'on' THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'operation_audit is append-only';
END
$$;
