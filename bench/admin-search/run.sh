#!/usr/bin/env bash
# Measures the admin search and overview queries on a million-row ledger, before and after the index,
# and the index's cost on the receive path's INSERT. Needs PostgreSQL on 127.0.0.1; takes ~10 minutes.
set -euo pipefail
cd "$(dirname "$0")"
DB=hl_bench_adminui
PSQL="psql -h 127.0.0.1 -U postgres -X -v ON_ERROR_STOP=1"
$PSQL -c "drop database if exists $DB" -c "create database $DB"
for f in ../../migrations/0*.sql; do $PSQL -q -d $DB --single-transaction -f "$f"; done
# A daily period for each of the 30 days the seed spreads its events over.
$PSQL -q -d $DB -c "select hookledger_add_ledger_period(d, d + interval '1 day')
  from generate_series(date_trunc('day', now() - interval '31 days', 'UTC'), date_trunc('day', now(), 'UTC'), interval '1 day') d
  where not exists (select 1 from ledger_periods where starts = d)"
echo "== seed"; $PSQL -q -d $DB -f seed.sql
$PSQL -d $DB -c "select pg_size_pretty(pg_total_relation_size('inbound_event_payloads_' || to_char(now(), 'YYYYMMDD'))) as table_size, count(*) from inbound_events"
./resume.sh
