import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inboundEvents } from '../../src/db/schema.js'
import { buildConfig } from '../../src/service/config.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { type MockStripe, startMockStripe } from '../support/mock-stripe.js'
import { runCommand } from '../support/run-command.js'
import { FAST_RELAY, FAST_WORKER, startTestService } from '../support/service.js'
import { startSink } from '../support/sink.js'
import { temporaryDirectory } from '../support/temp.js'

// `hookledger backfill` as an operator runs it: the built CLI in a child process, on the ledger
// database, against a local Stripe API; a running service's relay then processes what it claimed.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const API_KEY = 'sk_test_cli_backfill_key'
const directory = temporaryDirectory('hookledger-cli-backfill-')
const configPath = join(directory, 'hookledger.config.json')

let database: TestDatabase
let stripe: MockStripe
let sink: Awaited<ReturnType<typeof startSink>>
let configFile: Record<string, unknown>

function hookledger(args: string[], env: Record<string, string> = {}) {
  return runCommand(process.execPath, ['bin/hookledger.js', ...args], {
    cwd: ROOT,
    env: {
      LOG_LEVEL: 'silent',
      DATABASE_URL: database.url,
      HOOKLEDGER_CONFIG: configPath,
      STRIPE_API_KEY: API_KEY,
      ...env,
    },
  })
}

const rows = () =>
  database.db
    .select({ eventId: inboundEvents.eventId, origin: inboundEvents.origin, status: inboundEvents.status })
    .from(inboundEvents)
    .where(eq(inboundEvents.source, 'stripe'))

beforeAll(async () => {
  database = await createTestDatabase()
  stripe = await startMockStripe(API_KEY)
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  const created = Math.floor(Date.now() / 1000) - 3600
  for (let i = 1; i <= 3; i++) {
    stripe.addEvent({ id: `evt_cli_${i}`, type: 'invoice.paid', created: created + i })
    stripe.undelivered.add(`evt_cli_${i}`)
  }
  // Delivered as a webhook: delivery_success=false does not list it, so it is never fetched.
  stripe.addEvent({ id: 'evt_cli_delivered', type: 'invoice.paid', created: created + 4 })
  configFile = {
    sources: [
      {
        id: 'stripe',
        verify: { scheme: 'stripe', secrets: ['whsec_cli_backfill'] },
        handler: { type: 'forward', url: sink.url },
        backfill: { credential: 'env:STRIPE_API_KEY', apiBaseUrl: stripe.baseUrl },
      },
      {
        id: 'plain',
        verify: { scheme: 'github', secrets: ['s3cret'] },
        handler: { type: 'forward', url: sink.url },
      },
    ],
    worker: FAST_WORKER,
    relay: FAST_RELAY,
  }
  writeFileSync(configPath, JSON.stringify(configFile))
})

afterAll(async () => {
  await sink?.close()
  await stripe?.close()
  await database?.drop()
})

describe('hookledger backfill', () => {
  it('runs one pass, prints what it claimed, and a running service then processes the rows', async () => {
    const run = await hookledger(['backfill', '--source', 'stripe', '--since', '2d'])
    expect(run.stderr).toBe('')
    expect(run.status).toBe(0)
    expect(run.stdout).toMatch(
      /^source 'stripe' \(stripe\): listed 3 events since \d{4}-\d\d-\d\dT[\d:.]+Z, in 1 page\(s\)$/m,
    )
    expect(run.stdout).toContain('claimed 3 missing event(s): evt_cli_3, evt_cli_2, evt_cli_1')
    expect(run.stdout).toContain('0 already in the ledger')
    expect(run.stdout).toMatch(/complete\n$/)
    // --since 2d: two days before the run, to the second (give or take the child's start-up).
    const since = Number(stripe.requests.at(-1)?.query.get('created[gte]'))
    expect(Math.abs(since - (Math.floor(Date.now() / 1000) - 2 * 86_400))).toBeLessThan(120)
    expect((await rows()).map((row) => row.origin)).toEqual(['backfill', 'backfill', 'backfill'])

    // The CLI enqueues nothing: the service's relay finds committed rows without a job.
    const config = buildConfig(configFile, (name) => (name === 'STRIPE_API_KEY' ? API_KEY : undefined))
    const service = await startTestService({ config, database })
    try {
      await expect
        .poll(async () => (await rows()).filter((row) => row.status === 'done').length, { timeout: 20_000 })
        .toBe(3)
    } finally {
      await service.close()
    }
    expect(sink.received.map((request) => request.headers['x-hookledger-event-id']).sort()).toEqual([
      'evt_cli_1',
      'evt_cli_2',
      'evt_cli_3',
    ])
  })

  it('continues the cursor without --since, and prints JSON with --json', async () => {
    const run = await hookledger(['backfill', '--source', 'stripe', '--json'])
    expect(run.status).toBe(0)
    const report = JSON.parse(run.stdout) as { claimed: string[]; duplicates: number; complete: boolean }
    expect(report).toMatchObject({ claimed: [], duplicates: 3, complete: true })
    expect(await rows()).toHaveLength(3)
  })

  it('exits 1 with the pass error on a rejected key, and 2 or 1 with one line for operator mistakes', async () => {
    const rejected = await hookledger(['backfill', '--source', 'stripe'], { STRIPE_API_KEY: 'sk_test_wrong' })
    expect(rejected.status).toBe(1)
    expect(rejected.stdout).toContain(
      'stopped: unauthorized: Stripe API rejected the key in STRIPE_API_KEY (401: Invalid API Key provided',
    )

    const noSource = await hookledger(['backfill'])
    expect(noSource.status).toBe(2)
    expect(noSource.stderr).toBe(
      'hookledger backfill: backfill needs --source ID (usage: hookledger backfill --help)\n',
    )

    const noBlock = await hookledger(['backfill', '--source', 'plain'])
    expect(noBlock.status).toBe(1)
    expect(noBlock.stderr).toMatch(/^hookledger backfill: source 'plain' has no backfill block/)

    const badSince = await hookledger(['backfill', '--source', 'stripe', '--since', 'yesterday'])
    expect(badSince.status).toBe(2)
    expect(badSince.stderr).toMatch(/--since must be an ISO date\/time .* got 'yesterday'/)

    const noKey = await hookledger(['backfill', '--source', 'stripe'], { STRIPE_API_KEY: '' })
    expect(noKey.status).toBe(1)
    expect(noKey.stderr).toMatch(
      /source 'stripe': backfill.credential: environment variable STRIPE_API_KEY is not set/,
    )
  })
})
