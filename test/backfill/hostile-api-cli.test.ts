import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { type HostileProvider, startHostileProvider, streamBody } from '../support/hostile-provider.js'
import { runCommand } from '../support/run-command.js'
import { temporaryDirectory } from '../support/temp.js'

// `hookledger backfill` against a provider API that misbehaves, as an operator would meet it: the
// built CLI in a child process whose peak memory the kernel reports, on a ledger database of its own.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PEAK_RSS = fileURLToPath(new URL('../support/peak-rss.mjs', import.meta.url))
const API_KEY = 'sk_test_hostile_cli_key'
const MIB = 1024 * 1024
const directory = temporaryDirectory('hookledger-hostile-cli-')
const configPath = join(directory, 'hookledger.config.json')
const rssPath = join(directory, 'peak-rss')

let database: TestDatabase
let provider: HostileProvider

async function backfill(source: string) {
  writeFileSync(rssPath, '')
  const run = await runCommand(
    process.execPath,
    ['--import', PEAK_RSS, 'bin/hookledger.js', 'backfill', '--source', source],
    {
      cwd: ROOT,
      env: {
        LOG_LEVEL: 'silent',
        DATABASE_URL: database.url,
        HOOKLEDGER_CONFIG: configPath,
        STRIPE_API_KEY: API_KEY,
        PEAK_RSS_FILE: rssPath,
      },
    },
  )
  return { ...run, peakRssMb: Number(readFileSync(rssPath, 'utf8')) / 1024 }
}

const event = (id: string) => ({
  id,
  object: 'event',
  type: 'invoice.paid',
  created: Math.floor(Date.now() / 1000) - 60,
  data: { object: { id: `in_${id}` } },
})

beforeAll(async () => {
  database = await createTestDatabase()
  provider = await startHostileProvider()
  const source = (id: string) => ({
    id,
    verify: { scheme: 'stripe', secrets: ['whsec_hostile_cli'] },
    handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
    backfill: { enabled: false, credential: 'env:STRIPE_API_KEY', apiBaseUrl: provider.baseUrl },
  })
  writeFileSync(configPath, JSON.stringify({ sources: [source('big'), source('leased')] }))
})

afterAll(async () => {
  await provider?.close()
  await database?.drop()
})

describe('hookledger backfill against a hostile provider API', () => {
  it('abandons a 200 MB page at maxResponseBytes: a specific error on one line, and the memory stays flat', async () => {
    // The same pass on an empty page first: what the process needs anyway.
    provider.handle((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ object: 'list', url: '/v1/events', has_more: false, data: [] }))
    })
    const baseline = await backfill('big')
    expect(baseline.status).toBe(0)
    provider.requests.length = 0

    const total = 200 * MIB
    // Valid JSON once whole, so reading it all would "succeed": only the size cap stops it.
    const head = Buffer.from('{"object":"list","url":"/v1/events","has_more":false,"data":[],"padding":"')
    const filler = Buffer.alloc(64 * 1024, 'x')
    provider.handle(async (_request, response, record) => {
      // No content-length: the size shows only while the body is read.
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write(head)
      record.bytesSent = head.length
      await streamBody(response, record, filler, total - 2)
      if (!response.destroyed) response.end('"}')
    })
    const started = Date.now()
    const run = await backfill('big')
    const seconds = (Date.now() - started) / 1000

    expect(run.status).toBe(1)
    expect(run.stderr).toMatch(
      /^hookledger backfill: response_too_large: Stripe API answered GET \/v1\/events with a body over 16 MiB \(backfill\.maxResponseBytes\); it was abandoned after 16(\.\d)? MiB\. Lower backfill\.pageSize, or raise backfill\.maxResponseBytes if the pages really are that large\n$/,
    )
    expect(run.stdout).toContain('stopped: response_too_large:')
    // One request: a page over the cap is not fetched again.
    expect(provider.requests).toHaveLength(1)
    const sent = provider.requests[0]?.bytesSent ?? 0
    expect(sent).toBeLessThan(total / 4)
    expect(run.peakRssMb).toBeGreaterThan(0)
    expect(run.peakRssMb).toBeLessThan(300)
    const [cursor] = await database.sql`select last_error_code from backfill_cursors where source = 'big'`
    expect(cursor?.last_error_code).toBe('response_too_large')
    console.info(
      `200 MB page: peak RSS ${run.peakRssMb.toFixed(0)} MB (an empty page: ${baseline.peakRssMb.toFixed(0)} MB), ${(sent / MIB).toFixed(1)} MiB sent before the client hung up, ${seconds.toFixed(1)} s`,
    )
  }, 120_000)

  it('ends a pass whose lease another pass took over with lease_lost on one line, no stack trace', async () => {
    let pages = 0
    provider.handle(async (_request, response) => {
      pages++
      if (pages === 2) {
        // The pass is between pages: another one takes the source over (its lease ran out meanwhile).
        await database.sql`
          update backfill_cursors set lease_token = gen_random_uuid(), lease_until = now() + interval '1 hour'
          where source = 'leased'`
      }
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ object: 'list', has_more: true, data: [event(`evt_leased_${pages}`)] }))
    })
    const run = await backfill('leased')
    expect(run.status).toBe(1)
    expect(run.stderr).toBe(
      "hookledger backfill: lease_lost: the pass made no progress for longer than its lease (5 min) and another pass took source 'leased' over; this one stopped without writing more\n",
    )
    expect(run.stdout).toContain("source 'leased' (stripe): listed 2 events")
    expect(pages).toBe(2)
    // The new holder's lease stands: the stopped pass released nothing.
    const [cursor] = await database.sql`
      select lease_until > now() + interval '50 minutes' as held, sweep_resume from backfill_cursors
      where source = 'leased'`
    expect(cursor).toEqual({ held: true, sweep_resume: 'evt_leased_1' })
  })
})
