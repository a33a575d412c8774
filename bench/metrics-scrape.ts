// `npx tsx bench/metrics-scrape.ts`: what one /metrics scrape costs on a large ledger. Fills a
// throwaway database (BENCH_ROWS DONE events, a fifth as many completed operations, and a small
// backlog), then times the old full-table gauge queries against a scrape of today's gauges.
import { performance } from 'node:perf_hooks'
import { createMetrics } from '../src/metrics.js'
import { addOutboundGauges } from '../src/outbound/gauges.js'
import { addLedgerGauges } from '../src/queue/gauges.js'
import { createInProcessBackend } from '../src/queue/in-process.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventJobOptions } from '../src/queue/jobs.js'
import { createTestDatabase } from '../test/support/database.js'

const ROWS = Math.min(Number(process.env.BENCH_ROWS ?? 1_000_000), 5_000_000)
const BACKLOG = 500
const RUNS = 15

async function median(run: () => Promise<unknown>): Promise<number> {
  const times: number[] = []
  for (let i = 0; i < RUNS; i += 1) {
    const started = performance.now()
    await run()
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  return times[Math.floor(RUNS / 2)] ?? 0
}

const database = await createTestDatabase()
const { sql } = database
try {
  const filling = performance.now()
  await sql`
    insert into inbound_events (source, event_id, payload_hash, headers, status, processed_at)
    select 'src' || (n % 4), 'evt_' || n, md5(n::text), '{}',
      case when n <= ${BACKLOG} then 'pending'::event_status
           when n <= ${BACKLOG + 50} then 'failed'::event_status else 'done'::event_status end,
      now()
    from generate_series(1, ${ROWS}) as n`
  await sql`
    insert into operations (operation_key, tool, effect_class, payload_hash, args, status)
    select 'op:' || n, 'charge', 'irreversible', md5(n::text), '{}',
      case when n <= 20 then 'needs_reconciliation'::operation_status else 'completed'::operation_status end
    from generate_series(1, ${Math.floor(ROWS / 5)}) as n`
  await sql`vacuum analyze inbound_events`
  await sql`vacuum analyze operations`
  console.log(`filled ${ROWS} events in ${((performance.now() - filling) / 1000).toFixed(1)} s`)

  const before = await median(() =>
    Promise.all([
      sql`select source, status, count(*)::int from inbound_events group by source, status`,
      sql`select tool, status, count(*)::int from operations group by tool, status`,
    ]),
  )
  const metrics = createMetrics()
  const backend = createInProcessBackend()
  addLedgerGauges(
    metrics,
    sql,
    backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions),
    ['src0', 'src1', 'src2', 'src3'],
    2000,
  )
  addOutboundGauges(metrics, sql, { tools: ['charge'], operationDays: 90 })
  const after = await median(() => metrics.registry.metrics())
  const text = await metrics.registry.metrics()
  console.log(
    text
      .split('\n')
      .filter((line) => /^hookledger_(events|operations)/.test(line))
      .join('\n'),
  )
  console.log(
    `median of ${RUNS}: full-table gauge queries ${before.toFixed(1)} ms; whole scrape now ${after.toFixed(1)} ms`,
  )
  await backend.close()
} finally {
  await database.drop()
}
