#!/usr/bin/env bash
# The overview queries on the million-row ledger with the (received_at, id) index of 0002, then with
# the (received_at, id, source, status, processed_at) index of 0004 that replaces it. Timings swing
# with the machine's load; the buffer counts (pages read per query) do not.
set -euo pipefail
cd "$(dirname "$0")"
PSQL="psql -h 127.0.0.1 -U postgres -X -q -v ON_ERROR_STOP=1 -d hl_bench_adminui"
DAY="explain (analyze, buffers, costs off) select source, status, date_bin('900 seconds'::interval, received_at, now() - interval '1 day') as at, count(*)::int from inbound_events where received_at >= now() - interval '1 day' and received_at < now() group by 1, 2, 3"
$PSQL -c 'drop index if exists inbound_events_received_overview_idx, inbound_events_received_covering_idx' \
  -c 'create index if not exists inbound_events_received_id_idx on inbound_events (received_at, id)' -c 'vacuum analyze inbound_events'
echo "== (received_at, id)"; for i in 1 2 3; do $PSQL -f overview.sql | grep Time; done
$PSQL -c "$DAY" | grep -E "Scan|Buffers|Execution"
$PSQL -c '\timing on' -c 'create index inbound_events_received_overview_idx on inbound_events (received_at, id, source, status, processed_at)' \
  -c 'drop index inbound_events_received_id_idx' -c 'vacuum analyze inbound_events' | grep Time
echo "== (received_at, id, source, status, processed_at)"; for i in 1 2 3; do $PSQL -f overview.sql | grep Time; done
$PSQL -c "$DAY" | grep -E "Scan|Buffers|Execution"
