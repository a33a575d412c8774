import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { signDelivery } from '../../src/testing.js'
import { type Child, startChild } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { testRedisUrl } from '../support/env.js'
import { runCommand } from '../support/run-command.js'
import { TEST_SECRET } from '../support/signing.js'

// Each example in examples/ runs here as a reader would run it: plain node on the built package,
// against the real PostgreSQL and Redis.
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const AGENT_TOKEN = 'agent-token-for-the-examples'

let database: TestDatabase
let handlerExample: Child

beforeAll(async () => {
  database = await createTestDatabase()
  // code-handler.mjs also serves the agents' API that agent.mjs calls.
  handlerExample = await startChild(['examples/code-handler.mjs'], {
    DATABASE_URL: database.url,
    REDIS_URL: testRedisUrl(),
    SHOP_WEBHOOK_SECRET: TEST_SECRET,
    AGENT_TOKEN,
  })
})
afterAll(async () => {
  await handlerExample?.kill('SIGTERM')
  await database?.drop()
})

/** Runs `node ...args` to its end; the examples are short scripts. */
function runNode(args: string[], env: Record<string, string>) {
  return runCommand(process.execPath, args, { cwd: ROOT, env })
}

async function paidInvoices() {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} })
  try {
    return await sql<{ invoice_id: string; amount: number }[]>`select invoice_id, amount from paid_invoices`
  } finally {
    await sql.end()
  }
}

describe('examples/', () => {
  it('code-handler.mjs writes one row through ctx.tx for an event delivered twice', async () => {
    const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_42', amount: 1200 } })
    const headers = signDelivery('standard-webhooks', TEST_SECRET, body, { id: 'msg_example_1' })
    for (const expected of ['accepted', 'duplicate']) {
      const response = await fetch(`${handlerExample.url}/webhooks/shop`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      })
      expect(await response.json()).toMatchObject({ status: expected })
    }
    const deadline = Date.now() + 20_000
    while ((await paidInvoices()).length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(await paidInvoices()).toEqual([{ invoice_id: 'in_42', amount: 1200 }])
  })

  it('agent.mjs acts once: the second run finds the operation completed and sends nothing', async () => {
    const env = { HOOKLEDGER_URL: handlerExample.url, AGENT_TOKEN }
    const first = await runNode(['examples/agent.mjs', 'ord_7'], env)
    expect(first.stderr).toBe('')
    expect(first.status).toBe(0)
    expect(first.stdout).toMatch(/^sent the receipt for order ord_7 \(Idempotency-Key .+\)$/m)
    expect(first.stdout).toContain('operation receipt:ord_7 is completed')

    const second = await runNode(['examples/agent.mjs', 'ord_7'], env)
    expect(second.status).toBe(0)
    expect(second.stdout).not.toContain('sent the receipt')
    expect(second.stdout).toContain('already done: {"messageId":"receipt-ord_7"}')
  })

  it('receiver.test.mjs passes under node --test with hookledger/testing', async () => {
    // A database of its own, hence a queue prefix of its own: on code-handler.mjs's database, that
    // still-running example's worker would take the receiver's jobs too, and it has no 'stripe' handler.
    const own = await createTestDatabase()
    try {
      const run = await runNode(['--test', 'examples/receiver.test.mjs'], {
        DATABASE_URL: own.url,
        REDIS_URL: testRedisUrl(),
      })
      expect(run.stdout).toMatch(/^# pass 2$/m)
      expect(run.stdout).toMatch(/^# fail 0$/m)
      expect(run.status).toBe(0)
    } finally {
      await own.drop()
    }
  })
})
