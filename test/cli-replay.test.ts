import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runReplay } from '../src/cli/replay.js'
import { runSign } from '../src/cli/sign.js'
import { ConfigError } from '../src/config/config.js'
import { readClientEnvironment } from '../src/config/env.js'
import { inboundEvents } from '../src/db/schema.js'
import type { EventHandler } from '../src/outbound/event-handler.js'
import { buildConfig } from '../src/service/config.js'
import { generateStandardWebhooksKeyPair } from '../src/testing.js'
import { runCommand } from './support/run-command.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from './support/service.js'
import { storedEvents } from './support/stored-events.js'
import { temporaryDirectory } from './support/temp.js'

// `hookledger replay` and `sign` against the whole service in this process: every fixture is signed
// with the secret its source is configured with (from the config file and the environment), sent,
// recorded once however often it is sent, and handed to the worker.

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const FIXTURES = join(ROOT, 'fixtures')
const keyPair = generateStandardWebhooksKeyPair()

const SECRETS = {
  STRIPE_SECRET: 'whsec_replay_test_stripe_secret',
  GITHUB_SECRET: 'replay-test-github',
  SHOPIFY_SECRET: 'replay-test-shopify',
  SLACK_SECRET: 'replay-test-slack-signing-secret',
  PADDLE_SECRET: 'pdl_ntfset_replay_test',
  SQUARE_SECRET: 'replay-test-square-key',
  STD_SECRET: 'whsec_cmVwbGF5LXRlc3Qtc3RhbmRhcmQtd2ViaG9va3M=',
}

const configFile = {
  sources: [
    { id: 'stripe', verify: { scheme: 'stripe', secrets: ['env:STRIPE_SECRET'] } },
    { id: 'github', verify: { scheme: 'github', secrets: ['env:GITHUB_SECRET'] } },
    { id: 'shopify', verify: { scheme: 'shopify', secrets: ['env:SHOPIFY_SECRET'] } },
    { id: 'slack', verify: { scheme: 'slack', secrets: ['env:SLACK_SECRET'] } },
    { id: 'paddle', verify: { scheme: 'paddle', secrets: ['env:PADDLE_SECRET'] } },
    {
      id: 'square',
      verify: {
        scheme: 'square',
        secrets: ['env:SQUARE_SECRET'],
        notificationUrl: 'https://hooks.example.com/webhooks/square',
      },
    },
    { id: 'std', verify: { scheme: 'standard-webhooks', secrets: ['env:STD_SECRET'] } },
    { id: 'std-ed25519', verify: { scheme: 'standard-webhooks', secrets: [keyPair.publicKey] } },
  ],
  worker: FAST_WORKER,
  relay: FAST_RELAY,
}

let service: TestService
const configPath = join(temporaryDirectory('hookledger-replay-'), 'hookledger.config.json')
const handled: Array<{ source: string; eventId: string; event: unknown }> = []

beforeAll(async () => {
  writeFileSync(configPath, JSON.stringify(configFile))
  const record: EventHandler = async ({ source, eventId, event }) => {
    handled.push({ source, eventId, event })
  }
  service = await startTestService({
    config: buildConfig(configFile, (name) => SECRETS[name as keyof typeof SECRETS]),
    handlers: Object.fromEntries(configFile.sources.map((source) => [source.id, record])),
  })
})
afterAll(async () => {
  await service.close()
})

function environment(extra: Record<string, string> = {}) {
  return readClientEnvironment({ HOOKLEDGER_CONFIG: configPath, ...SECRETS, ...extra })
}

async function run(command: typeof runReplay, args: string[], extra: Record<string, string> = {}) {
  let stdout = ''
  let stderr = ''
  const code = await command(args, environment(extra), {
    stdout: (text) => {
      stdout += text
    },
    stderr: (text) => {
      stderr += text
    },
  })
  return { code, stdout, stderr, lines: stdout.trimEnd().split('\n') }
}

async function rowsOf(source: string) {
  return storedEvents(service.database.db, eq(inboundEvents.source, source))
}

const PROVIDERS = [
  { source: 'stripe', dir: 'stripe', eventIds: ['evt_3QmZx8LkdIwHu7ix0A1b2C3d'] },
  { source: 'github', dir: 'github', eventIds: ['72d3162e-cc78-11e3-81ab-4c9367dc0958'] },
  { source: 'shopify', dir: 'shopify', eventIds: ['98880550-7158-44d4-b7cd-2c97c8a091b5'] },
  { source: 'paddle', dir: 'paddle', eventIds: ['evt_01jdy7v8s0m5k9c2z0q8w4h3r1'] },
  { source: 'square', dir: 'square', eventIds: ['13b867cf-db3d-4b1c-90b6-2f32a9d78124'] },
  { source: 'std', dir: 'standard-webhooks', eventIds: ['msg_2pL9cWbq0kXhJdUe7tVr4sYn1Aa'] },
]

describe('hookledger replay', () => {
  for (const provider of PROVIDERS) {
    it(`${provider.source}: --times 4 --concurrency 4 records the fixture once and answers the rest as duplicates`, async () => {
      const result = await run(runReplay, [
        join(FIXTURES, provider.dir),
        '--source',
        provider.source,
        '--url',
        service.url,
        '--times',
        '4',
        '--concurrency',
        '4',
      ])
      expect(result.stderr).toBe('')
      expect(result.code).toBe(0)
      expect(result.lines.filter((line) => /^200 accepted /.test(line))).toHaveLength(1)
      expect(result.lines.filter((line) => /^200 duplicate /.test(line))).toHaveLength(3)
      expect(result.lines.at(-1)).toMatch(
        /^4 deliveries to .*: 1 accepted, 3 duplicate, 0 handshake, 0 unexpected$/,
      )
      const rows = await rowsOf(provider.source)
      expect(rows.map((row) => row.eventId).sort()).toEqual(provider.eventIds)
    })
  }

  it('shopify: the row keeps both X-Shopify-Event-Id and X-Shopify-Webhook-Id', async () => {
    const [row] = await rowsOf('shopify')
    expect(row?.headers).toMatchObject({
      'x-shopify-event-id': '98880550-7158-44d4-b7cd-2c97c8a091b5',
      'x-shopify-webhook-id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
      'x-shopify-topic': 'orders/create',
    })
    expect(row?.eventType).toBe('orders/create')
  })

  it('slack: events and form-encoded interactivity are recorded, the url_verification handshake answered', async () => {
    const result = await run(runReplay, [join(FIXTURES, 'slack'), '--source', 'slack', '--url', service.url])
    expect(result.code).toBe(0)
    expect(result.lines.at(-1)).toMatch(
      /3 deliveries .*: 2 accepted, 0 duplicate, 1 handshake, 0 unexpected$/,
    )
    expect(result.stdout).toMatch(/200 handshake .*url_verification\.json {2}\{"challenge":"3eZbrw1aBm2rZgRN/)
    const rows = await rowsOf('slack')
    const form = rows.find((row) => row.eventId === '8208461925573.12345678.0a1b2c3d4e5f')
    // The exact bytes, still form-encoded: nothing was re-encoded as JSON on the way in.
    expect(form?.body.equals(readFileSync(join(FIXTURES, 'slack/block_actions.form')))).toBe(true)
    expect(form?.headers['content-type']).toBe('application/x-www-form-urlencoded')
    expect(form?.eventType).toBe('block_actions')
    expect(rows.find((row) => row.eventId === 'Ev08MFMKH6')?.eventType).toBe('app_mention')
  })

  it('the worker then handles each recorded event exactly once', async () => {
    const expected = (await service.database.db.select().from(inboundEvents)).length
    expect(expected).toBe(PROVIDERS.length + 2)
    const deadline = Date.now() + 15_000
    while (handled.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    expect(handled).toHaveLength(expected)
    const keys = handled.map((event) => `${event.source}:${event.eventId}`)
    expect(new Set(keys).size).toBe(keys.length)
  })

  it('a wrong secret: every delivery is a 401, each printed, and the exit status is 1', async () => {
    const result = await run(runReplay, [
      join(FIXTURES, 'stripe/payment_intent.succeeded.json'),
      '--source',
      'stripe',
      '--url',
      service.url,
      '--times',
      '2',
      '--secret',
      'whsec_not_the_configured_one',
    ])
    expect(result.code).toBe(1)
    expect(result.lines.filter((line) => /^401 error +.*invalid_signature: /.test(line))).toHaveLength(2)
    expect(result.lines.at(-1)).toMatch(/0 accepted, 0 duplicate, 0 handshake, 2 unexpected$/)
  })

  it('an unreachable receiver counts as unexpected too', async () => {
    const result = await run(runReplay, [
      join(FIXTURES, 'github'),
      '--source',
      'github',
      '--url',
      'http://127.0.0.1:9',
    ])
    expect(result.code).toBe(1)
    expect(result.lines[0]).toMatch(/^--- error /)
  })

  it('v1a: a source holding only a whpk_ key needs the sender key from --secret (env:NAME works)', async () => {
    const args = [join(FIXTURES, 'standard-webhooks'), '--source', 'std-ed25519', '--url', service.url]
    await expect(run(runReplay, args)).rejects.toThrow(ConfigError)
    const result = await run(runReplay, [...args, '--secret', 'env:SENDER_KEY'], {
      SENDER_KEY: keyPair.signingKey,
    })
    expect(result.code).toBe(0)
    expect(result.lines[0]).toMatch(/^200 accepted /)
  })

  it('refuses bad arguments with usage, exit status 2', async () => {
    expect((await run(runReplay, ['--source', 'stripe'])).code).toBe(2)
    expect((await run(runReplay, [FIXTURES, '--source', 'stripe', '--times', '0'])).code).toBe(2)
    const missing = await run(runReplay, ['/nonexistent/fixture.json', '--source', 'stripe'])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toMatch(/cannot read \/nonexistent\/fixture\.json: ENOENT/)
  })
})

describe('hookledger sign', () => {
  it('prints the headers a provider sends; sent with the body, they are accepted', async () => {
    const file = join(FIXTURES, 'github/push.json')
    const result = await run(runSign, ['--source', 'github', file])
    expect(result.code).toBe(0)
    const headers = result.lines.map((line) => {
      const colon = line.indexOf(': ')
      return [line.slice(0, colon), line.slice(colon + 2)] as [string, string]
    })
    expect(headers.map(([name]) => name)).toEqual(
      expect.arrayContaining(['X-GitHub-Event', 'X-GitHub-Delivery', 'x-hub-signature-256', 'Content-Type']),
    )
    // The fixture's event was claimed by an earlier case: forget it, key included, to claim it anew.
    await service.database.db.delete(inboundEvents).where(eq(inboundEvents.source, 'github'))
    await service.database.sql`delete from inbound_event_keys where source = 'github'`
    const response = await fetch(`${service.url}/webhooks/github`, {
      method: 'POST',
      headers,
      body: readFileSync(file),
    })
    expect(response.status).toBe(200)
    expect(await response.json()).toMatchObject({ status: 'accepted' })
  })

  it('--curl prints one shell-quoted command', async () => {
    const result = await run(runSign, [
      '--source',
      'stripe',
      join(FIXTURES, 'stripe/payment_intent.succeeded.json'),
      '--curl',
      '--url',
      'https://hooks.example.com',
    ])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(
      /^curl -sS -X POST .*-H 'stripe-signature: t=\d+,v1=[0-9a-f]{64}' --data-binary '@.*payment_intent\.succeeded\.json' 'https:\/\/hooks\.example\.com\/webhooks\/stripe'\n$/,
    )
  })
})

describe('the hookledger binary', () => {
  it('dispatches sign and replay, reading the config file and secrets from the environment', async () => {
    // Asynchronous on purpose: the replay posts to the service running in this very process.
    const cli = (args: string[]) =>
      runCommand(process.execPath, ['bin/hookledger.js', ...args], {
        cwd: ROOT,
        env: { HOOKLEDGER_CONFIG: configPath, ...SECRETS },
      })
    const signed = await cli(['sign', '--source', 'paddle', 'fixtures/paddle/transaction.completed.json'])
    expect(signed.stderr).toBe('')
    expect(signed.status).toBe(0)
    expect(signed.stdout).toMatch(/^paddle-signature: ts=\d+;h1=[0-9a-f]{64}$/m)
    const replayed = await cli(['replay', 'fixtures/paddle', '--source', 'paddle', '--url', service.url])
    expect(replayed.status).toBe(0)
    expect(replayed.stdout).toMatch(/^200 duplicate /)
    const unknown = await cli(['replay', 'fixtures/paddle', '--source', 'nope', '--url', service.url])
    expect(unknown.status).toBe(1)
    expect(unknown.stderr).toMatch(/no source 'nope'/)
  })
})
