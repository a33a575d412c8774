import { eq } from 'drizzle-orm'
import { describe, expect, it } from 'vitest'
import { operationAudit, operations } from '../../src/db/outbound-schema.js'
import { inboundEvents } from '../../src/db/schema.js'
import type { FailpointName } from '../../src/failpoints.js'
import { type MockService, startMockService } from '../support/mock-service.js'
import { FAST_RELAY, serviceHarness } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'

const harness = serviceHarness({
  folder: 'hookledger-outbound-crash-',
  config: {
    sources: [{ id: 'acme', verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] } }],
    // Many short inbound retries: the event keeps coming back while the outbound lease runs out.
    worker: {
      concurrency: 2,
      maxAttempts: 30,
      backoffBaseMs: 100,
      backoffMaxMs: 800,
      handlerTimeoutMs: 2000,
      leaseMs: 3000,
      stalledIntervalMs: 1000,
    },
    relay: FAST_RELAY,
    outbound: {
      leaseMs: 1500,
      backoffBaseMs: 50,
      backoffMaxMs: 200,
      reconcileDelayMs: 300,
      sweepIntervalMs: 300,
    },
  },
})

/** The crash server whose handler charges through `service` with the tool effect `effect`. */
function start(service: MockService, effect: string, failpoint?: FailpointName) {
  return harness.startChild({
    entry: ['test/support/outbound-crash-server.mjs'],
    env: { TEST_PAYMENTS_URL: service.url, TEST_CHARGE_EFFECT: effect },
    failpoint,
  })
}

async function deliver(url: string, id: string) {
  const body = JSON.stringify({ type: 'order.paid', order: id })
  const response = await fetch(`${url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
}

async function operation(key: string) {
  const [row] = await harness.database.db.select().from(operations).where(eq(operations.operationKey, key))
  return row
}

/** Kills the worker after the charge landed and before the ledger recorded it, then restarts it. */
async function crashAfterCharge(service: MockService, effect: string, eventId: string) {
  const doomed = await start(service, effect, 'outbound.after_execute')
  await deliver(doomed.url, eventId)
  expect(await doomed.exited).toBe('SIGKILL')
  const key = `acme:${eventId}:charge`
  expect(service.charges.filter((c) => c.reference === key)).toHaveLength(1)
  expect((await operation(key))?.status).toBe('in_progress')
  const survivor = await start(service, effect)
  try {
    await expect
      .poll(async () => (await operation(key))?.status, { timeout: 40_000, interval: 200 })
      .toBe('completed')
    await expect
      .poll(
        async () =>
          (
            await harness.database.db.select().from(inboundEvents).where(eq(inboundEvents.eventId, eventId))
          )[0]?.status,
        { timeout: 20_000, interval: 200 },
      )
      .toBe('done')
  } finally {
    await survivor.kill('SIGTERM')
  }
  return key
}

describe('SIGKILL after the charge landed, before the outcome was recorded', () => {
  it('a receiver that honors keys: three times out of three, exactly one charge', async () => {
    const service = await startMockService({ honorKeys: true })
    try {
      for (let trial = 1; trial <= 3; trial += 1) {
        const key = await crashAfterCharge(service, 'idempotent', `evt_honor_${trial}`)
        // The restarted worker re-executed with the same key; the receiver turned it into a no-op.
        expect(service.requests.filter((r) => r.key === key && r.path === '/charges')).toHaveLength(2)
        expect(service.charges.filter((c) => c.reference === key)).toHaveLength(1)
      }
      expect(service.charges).toHaveLength(3)
    } finally {
      await service.close()
    }
  }, 180_000)

  it('a receiver that ignores keys: needs_reconciliation, reconciliation finds the charge, never a second', async () => {
    const service = await startMockService({ honorKeys: false })
    try {
      for (let trial = 1; trial <= 3; trial += 1) {
        const key = await crashAfterCharge(service, 'irreversible', `evt_ignore_${trial}`)
        expect(service.requests.filter((r) => r.key === key && r.method === 'POST')).toHaveLength(1)
        expect(service.charges.filter((c) => c.reference === key)).toHaveLength(1)
        const op = await operation(key)
        expect(op?.evidence).toMatchObject({ matches: 1 })
        expect(op?.downstreamId).toBe(service.charges.find((c) => c.reference === key)?.id)
        const events = await harness.database.db
          .select({ event: operationAudit.event, actor: operationAudit.actor })
          .from(operationAudit)
          .where(eq(operationAudit.operationKey, key))
          .orderBy(operationAudit.id)
        expect(events.map((e) => e.event)).toEqual(
          expect.arrayContaining(['claimed', 'lease_taken_over', 'needs_reconciliation', 'reconciled_found']),
        )
        expect(events.at(-1)).toEqual({ event: 'reconciled_found', actor: 'reconciler' })
      }
      expect(service.charges).toHaveLength(3)
    } finally {
      await service.close()
    }
  }, 180_000)
})
