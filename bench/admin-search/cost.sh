#!/usr/bin/env bash
# The index's cost on the receive path: the same one-row INSERT into two empty copies of
# inbound_events, one with the GIN index and one without, alternated to share the machine's noise.
set -euo pipefail
cd "$(dirname "$0")"
DB=hl_bench_adminui
PSQL="psql -h 127.0.0.1 -U postgres -X -q -v ON_ERROR_STOP=1 -d $DB"
$PSQL -c 'drop table if exists bench_with, bench_without' \
  -c 'create table bench_with (like inbound_events including all)' \
  -c 'create table bench_without (like inbound_events including all)'
$PSQL -At -c "select indexname from pg_indexes where tablename = 'bench_without' and indexdef like '%gin%'" |
  while read -r name; do $PSQL -c "drop index $name"; done
echo "== CPU of the expression alone, per row, over 200 000 stored bodies"
$PSQL -c '\timing on' -c 'select count(convert_from(body, $$UTF8$$)::jsonb) from (select body from inbound_events limit 200000) b' \
  -c 'select count(hookledger_body_json(body)) from (select body from inbound_events limit 200000) b'
for round in 1 2; do
  for table in bench_without bench_with; do
    sed "s/insert into inbound_events/insert into $table/" insert.pgbench > /tmp/insert-$table.pgbench
    echo "== $table, round $round, 1 client"
    pgbench -h 127.0.0.1 -U postgres -n -c 1 -T 15 -f /tmp/insert-$table.pgbench $DB | grep -E "tps|latency average"
    echo "== $table, round $round, 8 clients"
    pgbench -h 127.0.0.1 -U postgres -n -c 8 -j 2 -T 15 -f /tmp/insert-$table.pgbench $DB | grep -E "tps|latency average"
  done
done
echo "== bulk: 100 000 stored rows copied into each table in one statement (CPU and WAL, not fsync)"
for round in 1 2; do
  for table in bench_without bench_with; do
    $PSQL -c "truncate $table"
    echo "-- $table, round $round"
    $PSQL -c '\timing on' -c "insert into $table select * from inbound_events where source <> 'bench' order by received_at limit 100000" | grep Time
  done
done
