#!/usr/bin/env bash
# The steps of run.sh after the seed, for re-measuring on an already seeded database.
set -euo pipefail
cd "$(dirname "$0")"
DB=hl_bench_adminui
PSQL="psql -h 127.0.0.1 -U postgres -X -v ON_ERROR_STOP=1"
$PSQL -d $DB -c 'drop index if exists inbound_event_payloads_body_idx'
echo "== queries without the index"; $PSQL -d $DB -f queries.sql
echo "== insert cost without the index"; pgbench -h 127.0.0.1 -U postgres -n -c 4 -j 2 -T 20 -f insert.pgbench $DB | grep -E "tps|latency"
echo "== create index"; $PSQL -d $DB -c '\timing on' -c 'CREATE INDEX inbound_event_payloads_body_idx ON inbound_event_payloads USING gin (hookledger_body_json(body) jsonb_path_ops)' -c 'analyze inbound_event_payloads'
$PSQL -d $DB -c "select pg_size_pretty(sum(pg_relation_size(i.inhrelid))) as gin_size from pg_inherits i where i.inhparent = 'inbound_event_payloads_body_idx'::regclass"
echo "== queries with the index"; $PSQL -d $DB -f queries.sql
echo "== insert cost with the index"; pgbench -h 127.0.0.1 -U postgres -n -c 4 -j 2 -T 20 -f insert.pgbench $DB | grep -E "tps|latency"
