import type postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openLedger } from '../../src/db/client.js'
import { estimatedRows } from '../../src/db/gauge-queries.js'
import { createHealthApp } from '../../src/http/app.js'
import { createLogger } from '../../src/logger.js'
import { addGauge, createMetrics } from '../../src/metrics.js'
import { addOutboundGauges } from '../../src/outbound/gauges.js'
import { addLedgerGauges } from '../../src/queue/gauges.js'
import { createInProcessBackend } from '../../src/queue/in-process.js'
import { INBOUND_QUEUE, type ProcessEventData, processEventJobOptions } from '../../src/queue/jobs.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { captureLogs } from '../support/log-capture.js'
import { startTestService } from '../support/service.js'

let database: TestDatabase
beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

const DONE_ROWS = 20_000
const METRICS_TOKEN = 'metrics-token-0123456789'

interface TableReads {
  seqTupRead: number
  idxTupFetch: number
  scans: number
}

/** Rows the scans of the table (or its partitions) returned since its counters were reset (flushed when a backend exits). */
async function tableReads(admin: postgres.Sql, table: string): Promise<TableReads> {
  const [row] = await admin<Array<TableReads>>`
    select coalesce(sum(seq_tup_read), 0)::int as "seqTupRead", coalesce(sum(idx_tup_fetch), 0)::int as "idxTupFetch",
      coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::int as scans
    from pg_stat_user_tables
    where relid = ${table}::regclass or relid in (select relid from pg_partition_tree(${table}::regclass))`
  return row ?? { seqTupRead: 0, idxTupFetch: 0, scans: 0 }
}

describe('/metrics size estimate', () => {
  it('counts the rows of a ledger never analyzed (a new one, or autovacuum off)', async () => {
    const fresh = await createTestDatabase()
    try {
      await fresh.sql`
        insert into inbound_events (source, event_id, payload_hash, headers, status)
        select 'acme', 'evt_' || n, md5(n::text), '{}', 'done'::event_status
        from generate_series(1, 1200) as n`
      // The inserting backend reports its counts within a second of going idle.
      await expect.poll(() => estimatedRows(fresh.sql, 'inbound_events'), { timeout: 5000 }).toBe(1200)
      await fresh.sql`delete from inbound_events where event_id in ('evt_1', 'evt_2')`
      await expect.poll(() => estimatedRows(fresh.sql, 'inbound_events'), { timeout: 5000 }).toBe(1198)
    } finally {
      await fresh.drop()
    }
  })
})

describe('/metrics on a large ledger', () => {
  it('reads the backlog and the size estimate, never the DONE rows, so a scrape does not grow with the ledger', async () => {
    const { sql } = database
    await sql`
      insert into inbound_events (source, event_id, payload_hash, headers, status)
      select 'acme', 'evt_' || n, md5(n::text), '{}',
        case when n <= 3 then 'pending'::event_status when n <= 5 then 'failed'::event_status
             else 'done'::event_status end
      from generate_series(1, ${DONE_ROWS + 5}) as n`
    await sql`
      insert into operations (operation_key, tool, effect_class, payload_hash, args, status)
      select 'op:' || n, 'charge', 'irreversible', md5(n::text), '{}',
        case when n <= 2 then 'needs_reconciliation'::operation_status else 'completed'::operation_status end
      from generate_series(1, ${DONE_ROWS}) as n`
    await sql`analyze inbound_events`
    await sql`analyze operations`
    // A partitioned table's reads are its partitions'.
    await sql`
      select pg_stat_reset_single_table_counters(relid) from pg_partition_tree('inbound_events'::regclass)`
    await sql`select pg_stat_reset_single_table_counters('operations'::regclass)`

    // Its own pool: closing it ends the backend, which flushes the table counters the test reads.
    const scraper = openLedger(database.url, { max: 1 })
    const metrics = createMetrics()
    const backend = createInProcessBackend()
    addLedgerGauges(
      metrics,
      scraper.sql,
      backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions),
      ['acme'],
      0,
    )
    addOutboundGauges(metrics, scraper.sql, { tools: ['charge'], operationDays: 90 })
    const text = await metrics.scrape()
    await scraper.close()
    await backend.close()

    expect(text).toContain('hookledger_events{source="acme",status="pending"} 3')
    expect(text).toContain('hookledger_events{source="acme",status="failed"} 2')
    expect(text).not.toContain('status="done"')
    expect(text).toContain(`hookledger_events_estimated_rows ${DONE_ROWS + 5}`)
    // The three PENDING rows were never enqueued: the gap between the ledger and the queue.
    expect(text).toContain('hookledger_events_unqueued 3')
    expect(text).toContain('hookledger_operations{tool="charge",status="needs_reconciliation"} 2')
    expect(text).toContain(`hookledger_operations_estimated_rows ${DONE_ROWS}`)

    for (const table of ['inbound_events', 'operations']) {
      await expect
        .poll(async () => (await tableReads(sql, table)).scans, { timeout: 10_000 })
        .toBeGreaterThan(0)
      const reads = await tableReads(sql, table)
      // The old gauges ran count(*) over the whole table: DONE_ROWS rows per scrape.
      expect(reads.seqTupRead + reads.idxTupFetch, table).toBeLessThan(100)
    }
  })
})

describe('/metrics scrapes', () => {
  it('share one read among concurrent scrapers and reuse it for the next second', async () => {
    const metrics = createMetrics()
    let reads = 0
    addGauge(metrics, {
      name: 'test_reads',
      help: 'reads of this gauge',
      labelNames: [],
      read: async () => {
        reads += 1
        await new Promise((resolve) => setTimeout(resolve, 50))
        return [{ labels: {}, value: reads }]
      },
    })
    const texts = await Promise.all(Array.from({ length: 8 }, () => metrics.scrape()))
    expect(reads).toBe(1)
    expect(new Set(texts).size).toBe(1)
    await metrics.scrape()
    expect(reads).toBe(1)
    // After the cache runs out, the next scrape reads again.
    await expect
      .poll(
        async () => {
          await metrics.scrape()
          return reads
        },
        { timeout: 5000 },
      )
      .toBe(2)
  })

  it('leave out a gauge whose store does not answer, count it, and still serve the rest', async () => {
    const told: string[] = []
    const metrics = createMetrics((gauge, error) => told.push(`${gauge}: ${(error as Error).message}`))
    addGauge(metrics, {
      name: 'test_queue_jobs',
      help: 'a gauge read from a store that is down',
      labelNames: ['state'],
      read: () => Promise.reject(new Error('Connection is closed.')),
    })
    addGauge(metrics, {
      name: 'test_events',
      help: 'a gauge read from a store that answers',
      labelNames: [],
      read: async () => [{ labels: {}, value: 7 }],
    })
    const first = await metrics.scrape()
    expect(first).toMatch(/^test_events 7$/m)
    expect(first).not.toMatch(/^test_queue_jobs/m)
    await expect
      .poll(
        async () =>
          (await metrics.scrape()).match(
            /^hookledger_gauge_read_failures_total\{gauge="test_queue_jobs"\} (\d+)/m,
          )?.[1],
        {
          timeout: 5000,
        },
      )
      .toMatch(/^[1-9]\d*$/)
    // Told once, not at every scrape.
    expect(told).toEqual(['test_queue_jobs: Connection is closed.'])
  })

  it('want METRICS_TOKEN as a bearer token when it is set', async () => {
    const running = await startTestService({
      database,
      role: 'api',
      env: { METRICS_TOKEN },
    })
    try {
      const anonymous = await fetch(`${running.url}/metrics`)
      expect(anonymous.status).toBe(401)
      expect(await anonymous.json()).toMatchObject({ error: { code: 'unauthorized' } })
      const wrong = await fetch(`${running.url}/metrics`, {
        headers: { authorization: 'Bearer metrics-token-wrong-one' },
      })
      expect(wrong.status).toBe(401)
      const authorised = await fetch(`${running.url}/metrics`, {
        headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      })
      expect(authorised.status).toBe(200)
      expect(await authorised.text()).toContain('hookledger_deliveries_total')
      // Health and readiness stay anonymous: orchestrators probe them without a token.
      expect((await fetch(`${running.url}/readyz`)).status).toBe(200)
    } finally {
      await running.close()
    }
  })
})

describe('/readyz', () => {
  it('names the failing check but keeps the driver text for the log', async () => {
    const leak = 'password authentication failed for user "ledger_admin" at db.internal:5432'
    const { logger, entries } = captureLogs('info')
    const app = createHealthApp(
      [
        { name: 'postgres', check: () => Promise.reject(new Error(leak)) },
        { name: 'redis', check: async () => 'PONG' },
      ],
      createMetrics(),
      logger,
    )
    const answer = await app.request('/readyz')
    expect(answer.status).toBe(503)
    const body = await answer.text()
    expect(JSON.parse(body)).toEqual({
      status: 'unavailable',
      checks: { postgres: 'unavailable', redis: 'ok' },
    })
    expect(body).not.toContain('password')
    expect(entries()).toContainEqual(
      expect.objectContaining({ check: 'postgres', err: expect.objectContaining({ message: leak }) }),
    )
  })

  it('stays ready, degraded, when a check that may fail so fails or does not answer in time', async () => {
    const { logger } = captureLogs('info')
    const app = createHealthApp(
      [
        { name: 'postgres', check: async () => undefined },
        {
          name: 'redis',
          check: () => new Promise(() => {}),
          degradedWhenFailing: () => 'unreachable: deliveries are committed and wait for the relay',
        },
        {
          name: 'other',
          check: () => Promise.reject(new Error('down')),
          degradedWhenFailing: () => undefined,
        },
      ],
      createMetrics(),
      logger,
    )
    const answer = await app.request('/readyz')
    expect(answer.status).toBe(503)
    expect(await answer.json()).toEqual({
      status: 'unavailable',
      checks: {
        postgres: 'ok',
        redis: 'unreachable: deliveries are committed and wait for the relay',
        other: 'unavailable',
      },
    })
  })

  it('keeps working for a worker-only process with no token', async () => {
    const app = createHealthApp([], createMetrics(), createLogger('silent'))
    expect((await app.request('/readyz')).status).toBe(200)
    expect((await app.request('/metrics')).status).toBe(200)
  })
})
