#!/usr/bin/env bash
# Measures the admin search and overview queries on a million-row ledger, before and after the index,
# and the index's cost on the receive path's INSERT. Needs PostgreSQL on 127.0.0.1; takes ~10 minutes.
set -euo pipefail
cd "$(dirname "$0")"
DB=hl_bench_adminui
PSQL="psql -h 127.0.0.1 -U postgres -X -v ON_ERROR_STOP=1"
$PSQL -c "drop database if exists $DB" -c "create database $DB"
for f in ../../migrations/000[01234]_*.sql; do $PSQL -q -d $DB -f "$f"; done
# The payloads table of 0005, without its index yet (measured before and after).
$PSQL -q -d $DB -f <(sed '/inbound_event_payloads_body_idx/d' ../../migrations/0005_*.sql)
echo "== seed"; $PSQL -q -d $DB -f seed.sql
$PSQL -d $DB -c "select pg_size_pretty(pg_total_relation_size('inbound_events')) as table_size, count(*) from inbound_events"
./resume.sh
