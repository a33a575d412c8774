import { eq, sql } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { outboundSettingsSchema } from '../../src/config/outbound.js'
import { listAttempts } from '../../src/db/operation-queries.js'
import { claimOperation, startAttempt } from '../../src/db/operations.js'
import { operationAttempts, operationAudit, operations } from '../../src/db/outbound-schema.js'
import { createLogger } from '../../src/logger.js'
import { payloadHash } from '../../src/outbound/hash.js'
import { createOutboundLedger, type ReconcileScheduler } from '../../src/outbound/ledger.js'
import { defineTool, type ExecuteResult, type Tool } from '../../src/outbound/tools.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { gate } from '../support/gate.js'

let db: TestDatabase
const scheduled: string[] = []
const scheduler: ReconcileScheduler = {
  async schedule(operationId) {
    scheduled.push(operationId)
  },
}
const settings = outboundSettingsSchema.parse({
  leaseMs: 2000,
  backoffBaseMs: 20,
  backoffMaxMs: 200,
  reconcileDelayMs: 0,
})
let ledger: ReturnType<typeof createOutboundLedger>
let counter = 0
function nextId() {
  counter += 1
  return counter
}
const freshKey = (label: string) => `test:${label}:${nextId()}`

beforeAll(async () => {
  db = await createTestDatabase()
  ledger = createOutboundLedger({ db: db.db, logger: createLogger('silent'), settings, scheduler })
})
afterAll(async () => {
  await db.drop()
})

/** A tool whose calls are counted, answering from a script of results (the last one repeats). */
function scripted<A>(
  effect: 'idempotent' | 'compensable' | 'irreversible',
  script: Array<ExecuteResult<string> | 'throw'>,
  extra: { undoFails?: boolean } = {},
) {
  const calls: Array<{ key: string; attempt: number; at: number }> = []
  const undos: string[] = []
  const tool: Tool<A, string> = defineTool<A, string>({
    name: `scripted-${effect}-${nextId()}`,
    effect,
    async execute(_args, ctx) {
      calls.push({ key: ctx.key, attempt: ctx.attempt, at: Date.now() })
      const next = script[Math.min(calls.length - 1, script.length - 1)]
      if (next === undefined || next === 'throw') throw new Error('connection reset after send')
      return next
    },
    ...(effect === 'compensable'
      ? {
          async undo(_args, ctx) {
            undos.push(ctx.key)
            return extra.undoFails ? { kind: 'failure', error: 'release endpoint down' } : { kind: 'success' }
          },
        }
      : {}),
  })
  return { tool, calls, undos }
}

async function opRow(key: string) {
  const [row] = await db.db.select().from(operations).where(eq(operations.operationKey, key))
  if (row === undefined) throw new Error(`no operation ${key}`)
  return row
}

/** A worker that claimed, committed its in-flight attempt, and died; its lease has run out. */
async function abandoned(tool: Tool<{ n: number }, string>, key: string, withUndoRef: boolean) {
  const claim = await claimOperation(db.db, {
    key,
    tool: tool.name,
    effect: tool.effect,
    payloadHash: payloadHash({ n: 1 }),
    args: { n: 1 },
    leaseMs: 60_000,
    actor: 'runtime',
  })
  if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`)
  await startAttempt(
    db.db,
    { op: claim.op, leaseToken: claim.leaseToken, actor: 'runtime' },
    {
      leaseMs: 60_000,
      closeLast: null,
      undoRefFor: withUndoRef ? (k) => ({ tool: tool.name, key: k }) : undefined,
    },
  )
  await db.db
    .update(operations)
    .set({ leaseUntil: sql`now() - interval '1 second'` })
    .where(eq(operations.operationKey, key))
}

describe('invoke: the guard', () => {
  it('completed: a repeat returns the stored result and runs nothing', async () => {
    const { tool, calls } = scripted<{ n: number }>('irreversible', [
      { kind: 'success', result: 'ch_1', downstreamId: 'ch_1' },
    ])
    const key = freshKey('completed')
    const first = await ledger.invoke(tool, { key, args: { n: 1 } })
    const again = await ledger.invoke(tool, { key, args: { n: 1 } })
    expect(first).toMatchObject({ kind: 'completed', result: 'ch_1', replayed: false })
    expect(again).toMatchObject({ kind: 'completed', result: 'ch_1', downstreamId: 'ch_1', replayed: true })
    expect(calls).toHaveLength(1)
    expect(calls[0]?.key).toBe(key)
  })

  it('hashes canonical JSON: key order does not make a conflict', async () => {
    const { tool, calls } = scripted<Record<string, unknown>>('idempotent', [
      { kind: 'success', result: 'ok' },
    ])
    const key = freshKey('canonical')
    await ledger.invoke(tool, { key, args: { a: 1, b: { c: 2, d: [1, 2] } } })
    const again = await ledger.invoke(tool, { key, args: { b: { d: [1, 2], c: 2 }, a: 1 } })
    expect(again.kind).toBe('completed')
    expect(calls).toHaveLength(1)
  })

  it('live lease: a concurrent invoke is told to retry later and runs nothing', async () => {
    const release = gate()
    let calls = 0
    const tool = defineTool<{ n: number }, string>({
      name: 'slow-tool',
      effect: 'idempotent',
      async execute() {
        calls += 1
        await release.opened
        return { kind: 'success', result: 'done' }
      },
    })
    const key = freshKey('lease')
    const first = ledger.invoke(tool, { key, args: { n: 1 } })
    await waitFor(async () => calls === 1)
    const second = await ledger.invoke(tool, { key, args: { n: 1 } })
    expect(second.kind).toBe('retry_later')
    if (second.kind === 'retry_later') expect(second.retryAfterMs).toBeGreaterThan(0)
    release.open()
    expect((await first).kind).toBe('completed')
    expect(calls).toBe(1)
  })

  it('payload conflict: the same key with other arguments or another tool is rejected', async () => {
    const { tool, calls } = scripted<{ amount: number }>('irreversible', [{ kind: 'success', result: 'ok' }])
    const other = scripted<{ amount: number }>('irreversible', [{ kind: 'success', result: 'other' }])
    const key = freshKey('conflict')
    await ledger.invoke(tool, { key, args: { amount: 100 } })
    const changed = await ledger.invoke(tool, { key, args: { amount: 1000 } })
    const otherTool = await ledger.invoke(other.tool, { key, args: { amount: 100 } })
    expect(changed.kind).toBe('payload_conflict')
    expect(otherTool.kind).toBe('payload_conflict')
    expect(calls).toHaveLength(1)
    expect(other.calls).toHaveLength(0)
    expect((await opRow(key)).args).toEqual({ amount: 100 })
  })

  it('50 concurrent invokes of one key execute once', async () => {
    const { tool, calls } = scripted<{ n: number }>('irreversible', [{ kind: 'success', result: 'once' }])
    const key = freshKey('fifty')
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, () => ledger.invoke(tool, { key, args: { n: 1 } })),
    )
    expect(calls).toHaveLength(1)
    const kinds = new Set(outcomes.map((o) => o.kind))
    expect([...kinds].every((k) => k === 'completed' || k === 'retry_later')).toBe(true)
    expect(outcomes.filter((o) => o.kind === 'completed' && !o.replayed)).toHaveLength(1)
  })

  it('a definite rejection fails the operation, and a repeat replays the failure without running', async () => {
    const { tool, calls } = scripted<{ n: number }>('idempotent', [
      { kind: 'rejection', error: '400 invalid amount' },
    ])
    const key = freshKey('rejected')
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'failed',
      reason: 'rejected',
    })
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'failed',
      error: '400 invalid amount',
    })
    expect(calls).toHaveLength(1)
  })
})

describe('invoke: the decision table', () => {
  it('idempotent: bounded backoff with the same key, doubling delays, then a surfaced error', async () => {
    const { tool, calls } = scripted<{ n: number }>('idempotent', ['throw'])
    const key = freshKey('idem-backoff')
    const outcome = await ledger.invoke(tool, { key, args: { n: 1 } })
    expect(outcome).toMatchObject({ kind: 'exhausted', attempts: 4 })
    expect(calls.map((c) => c.key)).toEqual([key, key, key, key])
    const gaps = calls.slice(1).map((c, i) => c.at - (calls[i]?.at ?? 0))
    expect(gaps[0]).toBeGreaterThanOrEqual(18)
    expect(gaps[1]).toBeGreaterThanOrEqual(38)
    expect(gaps[2]).toBeGreaterThanOrEqual(78)
    expect((await opRow(key)).status).toBe('exhausted')
    // Invoking again is a new bounded round: re-executing an idempotent call is safe.
    expect((await ledger.invoke(tool, { key, args: { n: 1 } })).kind).toBe('exhausted')
    expect(calls).toHaveLength(8)
  })

  it('idempotent: an unknown outcome is retried and succeeds under the same key', async () => {
    const { tool, calls } = scripted<{ n: number }>('idempotent', [
      'throw',
      { kind: 'unknown', error: '503' },
      { kind: 'success', result: 'ok' },
    ])
    const key = freshKey('idem-retry')
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'completed',
      result: 'ok',
    })
    expect(calls.map((c) => c.key)).toEqual([key, key, key])
  })

  it('compensable: an unknown outcome runs the undo with the same key, then retries under a new key', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('compensable', [
      'throw',
      { kind: 'success', result: 'res_2' },
    ])
    const key = freshKey('comp')
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'completed',
      result: 'res_2',
    })
    expect(calls.map((c) => c.key)).toEqual([key, `${key}#2`])
    expect(undos).toEqual([key])
    const attempts = await listAttempts(db.db, (await opRow(key)).id)
    expect(attempts.map((a) => [a.attemptKey, a.status])).toEqual([
      [key, 'compensated'],
      [`${key}#2`, 'succeeded'],
    ])
    // The undo reference was committed with the first attempt, before its call.
    expect(attempts[0]?.undoRef).toEqual({ tool: tool.name, key })
    const events = (await auditOf(key)).map((a) => a.event)
    expect(events.indexOf('compensated')).toBeLessThan(events.lastIndexOf('attempt_started'))
  })

  it('compensable: a failing undo leaves the operation needing reconciliation, not retried', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('compensable', ['throw'], { undoFails: true })
    const key = freshKey('comp-undo-fails')
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'needs_reconciliation',
      reason: 'undo_failed',
    })
    expect(calls).toHaveLength(1)
    expect(undos).toEqual([key])
    expect((await opRow(key)).status).toBe('needs_reconciliation')
  })

  it('compensable: when every attempt was undone and the cap is reached, it definitely did not happen', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('compensable', ['throw'])
    const key = freshKey('comp-all-undone')
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'failed',
      reason: 'undone',
    })
    expect(calls).toHaveLength(4)
    expect(undos).toEqual(calls.map((c) => c.key))
  })

  it('irreversible: an unknown outcome is never retried and never failed: it needs reconciliation', async () => {
    const { tool, calls } = scripted<{ n: number }>('irreversible', ['throw'])
    const key = freshKey('irrev')
    const outcome = await ledger.invoke(tool, { key, args: { n: 1 } })
    expect(outcome).toMatchObject({ kind: 'needs_reconciliation' })
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({ kind: 'needs_reconciliation' })
    expect(calls).toHaveLength(1)
    const row = await opRow(key)
    expect(row.status).toBe('needs_reconciliation')
    expect(scheduled).toContain(row.id)
  })
})

describe('invoke: an expired lease (an abandoned worker) per effect class', () => {
  it('idempotent: re-executes with the same key', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('idempotent', [{ kind: 'success', result: 'ok' }])
    const key = freshKey('takeover-idem')
    await abandoned(tool, key, false)
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({
      kind: 'completed',
      result: 'ok',
    })
    expect(calls.map((c) => [c.key, c.attempt])).toEqual([[key, 2]])
    expect(undos).toEqual([])
    expect((await auditOf(key)).map((a) => a.event)).toContain('lease_taken_over')
  })

  it('compensable: runs the recorded undo first, then executes under a new key', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('compensable', [{ kind: 'success', result: 'ok' }])
    const key = freshKey('takeover-comp')
    await abandoned(tool, key, true)
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({ kind: 'completed' })
    expect(undos).toEqual([key])
    expect(calls.map((c) => c.key)).toEqual([`${key}#2`])
  })

  it('compensable: an attempt without an undo reference was never sent, so nothing is undone', async () => {
    const { tool, calls, undos } = scripted<{ n: number }>('compensable', [{ kind: 'success', result: 'ok' }])
    const key = freshKey('takeover-comp-unsent')
    await abandoned(tool, key, false)
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({ kind: 'completed' })
    expect(undos).toEqual([])
    expect(calls).toHaveLength(1)
    const attempts = await listAttempts(db.db, (await opRow(key)).id)
    expect(attempts.map((a) => a.status)).toEqual(['not_sent', 'succeeded'])
  })

  it('irreversible: never re-executes; reconciliation is scheduled', async () => {
    const { tool, calls } = scripted<{ n: number }>('irreversible', [{ kind: 'success', result: 'ok' }])
    const key = freshKey('takeover-irrev')
    await abandoned(tool, key, false)
    expect(await ledger.invoke(tool, { key, args: { n: 1 } })).toMatchObject({ kind: 'needs_reconciliation' })
    expect(calls).toHaveLength(0)
    const row = await opRow(key)
    expect(scheduled).toContain(row.id)
    const attempts = await listAttempts(db.db, row.id)
    expect(attempts.map((a) => a.status)).toEqual(['unknown'])
  })
})

describe('audit', () => {
  it('records every status change with who and when, and refuses to be rewritten', async () => {
    const { tool } = scripted<{ n: number }>('compensable', ['throw', { kind: 'success', result: 'ok' }])
    const key = freshKey('audit')
    await ledger.invoke(tool, { key, args: { n: 1 } })
    const rows = await auditOf(key)
    expect(rows.map((r) => r.event)).toEqual([
      'claimed',
      'outcome_unknown',
      'undo_started',
      'compensated',
      'attempt_started',
      'succeeded',
    ])
    expect(rows.every((r) => r.actor === 'runtime' && r.at instanceof Date)).toBe(true)
    expect(rows.at(-1)).toMatchObject({ fromStatus: 'in_progress', toStatus: 'completed' })
    // Each row's from-status is the previous row's to-status: no transition is missing.
    for (let i = 1; i < rows.length; i += 1) expect(rows[i]?.fromStatus).toBe(rows[i - 1]?.toStatus)
    await expect(
      db.db.update(operationAudit).set({ actor: 'someone' }).where(eq(operationAudit.operationKey, key)),
    ).rejects.toThrow()
    await expect(db.db.delete(operationAudit).where(eq(operationAudit.operationKey, key))).rejects.toThrow()
    expect(await auditOf(key)).toHaveLength(rows.length)
  })

  it('keeps run, trace and tool-call ids for observability only', async () => {
    const { tool, calls } = scripted<{ n: number }>('irreversible', [{ kind: 'success', result: 'ok' }])
    const key = freshKey('observability')
    await ledger.invoke(tool, {
      key,
      args: { n: 1 },
      runId: 'run-1',
      traceId: 'trace-1',
      toolCallId: 'call-1',
    })
    // A retried model call brings new ids; the key alone decides, so nothing runs again.
    const again = await ledger.invoke(tool, { key, args: { n: 1 }, runId: 'run-2', toolCallId: 'call-2' })
    expect(again).toMatchObject({ kind: 'completed', replayed: true })
    expect(calls).toHaveLength(1)
    expect(await opRow(key)).toMatchObject({ runId: 'run-1', traceId: 'trace-1', toolCallId: 'call-1' })
    const attempts = await db.db
      .select()
      .from(operationAttempts)
      .where(eq(operationAttempts.operationId, (await opRow(key)).id))
    expect(attempts).toHaveLength(1)
  })
})

async function auditOf(key: string) {
  return db.db
    .select()
    .from(operationAudit)
    .where(eq(operationAudit.operationKey, key))
    .orderBy(operationAudit.id)
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error('condition not met in time')
}
