import { eq, inArray, sql } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import { operationAudit, operations } from '../../src/db/outbound-schema.js'
import { inboundEvents } from '../../src/db/schema.js'
import type { EventHandler } from '../../src/outbound/event-handler.js'
import { defineTool } from '../../src/outbound/tools.js'
import { deliverOrder } from '../support/crash-ledger.js'
import { FAST_RELAY, FAST_WORKER, serviceHarness, startTestService } from '../support/service.js'
import { testConfig } from '../support/stack.js'

// The whole service with REDIS_URL unset: the same ledger semantics on the in-process queue.

const harness = serviceHarness({
  setup: (database) => database.sql`create table handler_effects (event_id text not null)`,
})

// Orphan recovery is pushed far out, so whatever finishes the rows here is not that slow path.
const SLOW_ORPHANS = { ...FAST_RELAY, orphanAfterMs: 120_000 }
const config = testConfig({ worker: FAST_WORKER, relay: SLOW_ORPHANS }, { handler: undefined })

const recordingHandler =
  (calls: string[], pauseMs = 0): EventHandler =>
  async ({ eventId, tx }) => {
    calls.push(eventId)
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
    await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
  }

function start(handler: EventHandler, options: { config?: typeof config } = {}) {
  return harness.start({
    config: options.config ?? config,
    handlers: { acme: handler },
    inProcessQueue: true,
  })
}

async function rowsOf(eventIds: readonly string[]) {
  return harness.database.db
    .select()
    .from(inboundEvents)
    .where(inArray(inboundEvents.eventId, [...eventIds]))
}

async function effects(eventId: string) {
  return (
    await harness.database.sql`select count(*)::int as n from handler_effects where event_id = ${eventId}`
  )[0]?.n
}

describe('service without Redis (in-process queue)', () => {
  it('says so in /readyz and still counts its queue', async () => {
    const running = await start(recordingHandler([]))
    expect(running.service.queue).toEqual({ kind: 'in-process' })
    const ready = await fetch(`${running.url}/readyz`)
    expect(ready.status).toBe(200)
    expect(await ready.json()).toEqual({ status: 'ready', checks: { postgres: 'ok', queue: 'in-process' } })
    const metrics = await (await fetch(`${running.url}/metrics`)).text()
    expect(metrics).toMatch(/hookledger_queue_jobs\{state="waiting"\} 0/)
  })

  it('200 concurrent deliveries of one event: one row, one handler run, 1 accepted and 199 duplicates', async () => {
    const calls: string[] = []
    const running = await start(recordingHandler(calls))
    const url = running.url
    const responses = await Promise.all(Array.from({ length: 200 }, () => deliverOrder(url, 'evt_storm')))
    expect(responses.map((r) => r.status)).toEqual(Array(200).fill(200))
    const bodies = (await Promise.all(responses.map((r) => r.json()))) as Array<{ status: string }>
    const byKind: Record<string, number> = {}
    for (const { status } of bodies) byKind[status] = (byKind[status] ?? 0) + 1
    expect(byKind).toEqual({ accepted: 1, duplicate: 199 })
    expect(await rowsOf(['evt_storm'])).toHaveLength(1)
    await expect.poll(async () => (await rowsOf(['evt_storm']))[0]?.status, { timeout: 10_000 }).toBe('done')
    expect(calls).toEqual(['evt_storm'])
    expect(await effects('evt_storm')).toBe(1)
  })

  it('a handler failing twice then succeeding ends DONE after 3 attempts', async () => {
    let calls = 0
    const running = await start(async ({ eventId, tx }) => {
      calls += 1
      if (calls <= 2) throw new Error(`downstream refused (call ${calls})`)
      await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
    })
    expect((await deliverOrder(running.url, 'evt_flaky')).status).toBe(200)
    await expect.poll(async () => (await rowsOf(['evt_flaky']))[0]?.status, { timeout: 10_000 }).toBe('done')
    expect((await rowsOf(['evt_flaky']))[0]).toMatchObject({ attempts: 3 })
    expect(calls).toBe(3)
    expect(await effects('evt_flaky')).toBe(1)
  })

  it('after a restart, the rows the old process left PENDING all reach DONE at once', async () => {
    const calls: string[] = []
    const slow = testConfig(
      { worker: { ...FAST_WORKER, concurrency: 2 }, relay: SLOW_ORPHANS },
      { handler: undefined },
    )
    const first = await start(recordingHandler(calls, 150), { config: slow })
    const ids = Array.from({ length: 20 }, (_, i) => `evt_restart_${i}`)
    for (const id of ids) expect((await deliverOrder(first.url, id)).status).toBe(200)
    await expect.poll(() => calls.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(2)
    await first.close()

    // Their jobs died with the old process; the rows say they were enqueued, so only the start-up
    // pass (or orphan recovery, two minutes away) can find them.
    const left = (await rowsOf(ids)).filter((row) => row.status !== 'done')
    expect(left.length).toBeGreaterThan(0)
    expect(left.every((row) => row.status === 'pending' && row.enqueuedAt !== null)).toBe(true)

    const startedAt = Date.now()
    await start(recordingHandler(calls), { config: slow })
    await expect
      .poll(async () => (await rowsOf(ids)).every((row) => row.status === 'done'), { timeout: 10_000 })
      .toBe(true)
    expect(Date.now() - startedAt).toBeLessThan(10_000)
    expect([...calls].sort()).toEqual([...ids].sort())
    for (const id of ids) expect(await effects(id)).toBe(1)
  })

  it('reconciliation runs on the in-process queue: a found effect is recorded as success', async () => {
    let executed = 0
    const tool = defineTool<{ amount: number }, { id: string }>({
      name: 'in-process-charge',
      effect: 'irreversible',
      async execute() {
        executed += 1
        throw new Error('connection reset after send')
      },
      async reconcile(op) {
        return { kind: 'found', evidence: { lookedUp: op.key }, result: { id: 'ch_1' }, downstreamId: 'ch_1' }
      },
    })
    const withReconcile = testConfig(
      {
        worker: FAST_WORKER,
        relay: SLOW_ORPHANS,
        // The sweep is pushed out too: the scheduled reconcile job must do it.
        outbound: { reconcileDelayMs: 100, sweepIntervalMs: 120_000 },
      },
      { handler: undefined },
    )
    const running = await start(recordingHandler([]), { config: withReconcile })
    const key = 'test:in-process:reconcile'
    const outcome = await running.service.outbound.invoke(tool, { key, args: { amount: 5 } })
    expect(outcome).toMatchObject({ kind: 'needs_reconciliation' })
    const operation = async () =>
      (await harness.database.db.select().from(operations).where(eq(operations.operationKey, key)))[0]
    await expect.poll(async () => (await operation())?.status, { timeout: 10_000 }).toBe('completed')
    expect(await operation()).toMatchObject({ downstreamId: 'ch_1', resultJson: { id: 'ch_1' } })
    expect(executed).toBe(1)
    const audit = await harness.database.db
      .select({ event: operationAudit.event, actor: operationAudit.actor })
      .from(operationAudit)
      .where(eq(operationAudit.operationKey, key))
      .orderBy(operationAudit.id)
    expect(audit.at(-1)).toEqual({ event: 'reconciled_found', actor: 'reconciler' })
  })

  it('refuses an api-only or worker-only process, naming REDIS_URL and the role', async () => {
    await expect(
      startTestService({ database: harness.database, config, role: 'api', inProcessQueue: true }),
    ).rejects.toThrow(/REDIS_URL: is required for --role api/)
    await expect(
      startTestService({ database: harness.database, config, role: 'worker', inProcessQueue: true }),
    ).rejects.toThrow(/REDIS_URL: is required for --role worker/)
  })
})
