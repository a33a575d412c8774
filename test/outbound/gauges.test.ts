import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboundSettingsSchema } from '../../src/config/outbound.js'
import { createLogger } from '../../src/logger.js'
import { createMetrics } from '../../src/metrics.js'
import { decide } from '../../src/outbound/approvals.js'
import { addOutboundGauges } from '../../src/outbound/gauges.js'
import { createOutboundLedger } from '../../src/outbound/ledger.js'
import { reconcileOperation } from '../../src/outbound/reconcile.js'
import { defineTool } from '../../src/outbound/tools.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

let db: TestDatabase
const logger = createLogger('silent')

beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.drop()
})

/** The value of one series in Prometheus's text format, or undefined when it is absent. */
function series(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.slice(name.length + 1))
}

describe('outbound gauges on /metrics', () => {
  it('count operations by status, those waiting for reconciliation, and pending approvals', async () => {
    const ledger = createOutboundLedger({
      db: db.db,
      logger,
      settings: outboundSettingsSchema.parse({ reconcileDelayMs: 0 }),
    })
    // Every call loses its response, so each operation's outcome is unknown.
    const charge = defineTool<{ amount: number }, string>({
      name: 'charge',
      effect: 'irreversible',
      execute: async () => {
        throw new Error('socket hang up')
      },
      reconcile: async () => ({ kind: 'not_found', evidence: { matches: 0 } }),
    })
    const metrics = createMetrics()
    addOutboundGauges(metrics, db.sql, { tools: ['charge'], operationDays: 90 })
    const scrape = () => metrics.registry.metrics()

    const first = await ledger.invoke(charge, { key: 'order:g1:charge', args: { amount: 1 } })
    const second = await ledger.invoke(charge, { key: 'order:g2:charge', args: { amount: 2 } })
    if (first.kind !== 'needs_reconciliation' || second.kind !== 'needs_reconciliation') {
      throw new Error(`${first.kind}, ${second.kind}`)
    }
    let text = await scrape()
    expect(series(text, 'hookledger_operations{tool="charge",status="needs_reconciliation"}')).toBe(2)
    expect(series(text, 'hookledger_operations_needs_reconciliation')).toBe(2)
    expect(series(text, 'hookledger_approvals_pending')).toBe(0)
    expect(series(text, 'hookledger_approvals_oldest_pending_seconds')).toBe(0)

    const escalated = await reconcileOperation({ db: db.db, ledger, logger }, first.operationId)
    if (escalated.kind !== 'escalated') throw new Error(escalated.kind)
    text = await scrape()
    expect(series(text, 'hookledger_operations{tool="charge",status="awaiting_approval"}')).toBe(1)
    expect(series(text, 'hookledger_operations_needs_reconciliation')).toBe(1)
    expect(series(text, 'hookledger_approvals_pending')).toBe(1)
    expect(series(text, 'hookledger_approvals_oldest_pending_seconds')).toBeGreaterThanOrEqual(0)

    await decide(db.db, { approvalId: escalated.approvalId, decision: 'abandon', by: 'ops' })
    text = await scrape()
    expect(series(text, 'hookledger_approvals_pending')).toBe(0)
    // Settled operations leave the live series; the table's size is an estimate.
    expect(series(text, 'hookledger_operations{tool="charge",status="abandoned"}')).toBeUndefined()
    expect(series(text, 'hookledger_operations{tool="charge",status="awaiting_approval"}')).toBeUndefined()
    expect(series(text, 'hookledger_operations_estimated_rows')).toBeGreaterThanOrEqual(0)
  })
})
