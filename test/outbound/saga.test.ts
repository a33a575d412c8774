import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboundSettingsSchema } from '../../src/config/outbound.js'
import { createLogger } from '../../src/logger.js'
import { createOutboundLedger, type ReconcileScheduler } from '../../src/outbound/ledger.js'
import { reconcileOperation } from '../../src/outbound/reconcile.js'
import { saga } from '../../src/outbound/saga.js'
import { defineTool } from '../../src/outbound/tools.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { type MockService, postJson, startMockService } from '../support/mock-service.js'

let db: TestDatabase
let service: MockService
const logger = createLogger('silent')
const scheduled: string[] = []
const scheduler: ReconcileScheduler = { schedule: async (id) => void scheduled.push(id) }
let ledger: ReturnType<typeof createOutboundLedger>

beforeAll(async () => {
  db = await createTestDatabase()
  service = await startMockService({ honorKeys: true })
  const settings = outboundSettingsSchema.parse({
    leaseMs: 2000,
    backoffBaseMs: 10,
    backoffMaxMs: 50,
    reconcileDelayMs: 0,
  })
  ledger = createOutboundLedger({ db: db.db, logger, settings, scheduler })
})
afterAll(async () => {
  await service.close()
  await db.drop()
})

// The source document's worked sequence, against a service that honors idempotency keys.
const reserve = defineTool<{ sku: string }, Record<string, unknown>>({
  name: 'reserve',
  effect: 'compensable',
  execute: (args, ctx) => postJson(`${service.url}/reservations`, ctx.key, args, ctx.signal),
  async undo(_args, ctx) {
    const released = await postJson(
      `${service.url}/reservations/release`,
      ctx.key,
      { key: ctx.key },
      ctx.signal,
    )
    return released.kind === 'success' ? { kind: 'success' } : { kind: 'failure', error: released.error }
  },
})
const charge = defineTool<{ amount: number; card?: string }, Record<string, unknown>>({
  name: 'charge',
  effect: 'irreversible',
  execute: (args, ctx) =>
    postJson(`${service.url}/charges`, ctx.key, { ...args, reference: ctx.operationKey }, ctx.signal),
  async reconcile(op) {
    const response = await fetch(`${service.url}/charges?reference=${encodeURIComponent(op.key)}`)
    const { data } = (await response.json()) as { data: Array<{ id: string }> }
    return data[0] === undefined
      ? { kind: 'not_found' }
      : { kind: 'found', evidence: data, result: data[0], downstreamId: data[0].id }
  },
})
const confirm = defineTool<{ orderId: string }, Record<string, unknown>>({
  name: 'confirm',
  effect: 'idempotent',
  execute: (args, ctx) => postJson(`${service.url}/confirmations`, ctx.key, args, ctx.signal),
})

const order = (id: string, card?: string) =>
  saga(ledger, ['order', id], [
    { name: 'reserve', tool: reserve, args: { sku: 'sku_1' } },
    { name: 'charge', tool: charge, args: card === undefined ? { amount: 42 } : { amount: 42, card } },
    { name: 'confirm', tool: confirm, args: { orderId: id } },
  ] as never)

describe('saga: reserve (compensable), charge (irreversible), confirm (idempotent)', () => {
  it('survives a lost response at each step with one reservation, one charge, one confirmation', async () => {
    service.loseResponse('/reservations')
    service.loseResponse('/charges')
    service.loseResponse('/confirmations')
    const first = await order('551').run()
    // Reserve: released under its key, re-reserved under a new one. Charge: never retried.
    expect(first).toMatchObject({
      kind: 'stopped',
      step: 'charge',
      outcome: { kind: 'needs_reconciliation' },
    })
    expect(service.releases).toEqual(['order:551:reserve'])
    expect(service.reservations.filter((r) => !r.released).map((r) => r.key)).toEqual(['order:551:reserve#2'])
    if (first.kind !== 'stopped' || first.outcome.kind !== 'needs_reconciliation')
      throw new Error('expected a stop')
    expect(await reconcileOperation({ db: db.db, ledger, logger }, first.outcome.operationId)).toEqual({
      kind: 'recorded_success',
    })
    // The restart resumes at the charge (stored now) and runs only the confirmation, twice on the wire.
    const second = await order('551').run()
    expect(second.kind).toBe('completed')
    expect(service.charges.filter((c) => c.reference === 'order:551:charge')).toHaveLength(1)
    expect(service.confirmations).toHaveLength(1)
    expect(service.requests.filter((r) => r.path === '/confirmations').map((r) => r.key)).toEqual([
      'order:551:confirm',
      'order:551:confirm',
    ])
    expect(service.requests.filter((r) => r.path === '/reservations')).toHaveLength(2)
  })

  it('abort after a declined charge releases the reservation, in reverse order', async () => {
    const run = await order('552', 'declined').run()
    expect(run).toMatchObject({
      kind: 'stopped',
      step: 'charge',
      outcome: { kind: 'failed', reason: 'rejected' },
    })
    const aborted = await order('552', 'declined').abort()
    expect(aborted).toEqual({
      kind: 'aborted',
      compensated: ['reserve'],
      notCompensable: ['confirm', 'charge'],
    })
    expect(service.reservations.find((r) => r.key === 'order:552:reserve')?.released).toBe(true)
    expect(await order('552', 'declined').run()).toMatchObject({
      kind: 'stopped',
      step: 'reserve',
      outcome: { kind: 'failed', reason: 'compensated' },
    })
  })
})
