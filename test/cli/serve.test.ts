import { spawn, spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { type AddressInfo, createServer } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inboundEvents } from '../../src/db/schema.js'
import { type Child, freePort, startChild } from '../support/child.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { adminDatabaseUrl, testRedisUrl } from '../support/env.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { temporaryDirectory } from '../support/temp.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const CLI = 'bin/hookledger.js'

let database: TestDatabase
const directory = temporaryDirectory('hookledger-cli-')

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

function runCli(args: string[], env: Record<string, string>) {
  const result = spawnSync(process.execPath, [CLI, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  })
  return { status: result.status, stderr: result.stderr, stdout: result.stdout }
}

function writeConfig(name: string, config: unknown) {
  const path = join(directory, name)
  writeFileSync(path, JSON.stringify(config))
  return path
}

describe('hookledger serve', () => {
  it('receives, verifies, forwards and answers health checks, from the config file and env secrets', async () => {
    const sink = await startSink(() => ({ status: 200, body: 'thanks' }))
    const configPath = writeConfig('serve.json', {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: ['env:ACME_SECRET'] },
          handler: { type: 'forward', url: sink.url },
        },
      ],
    })
    let child: Child | undefined
    try {
      child = await startChild([CLI, 'serve', '--config', configPath], {
        DATABASE_URL: database.url,
        REDIS_URL: testRedisUrl(),
        ACME_SECRET: TEST_SECRET,
      })
      expect((await fetch(`${child.url}/healthz`)).status).toBe(200)
      const ready = await fetch(`${child.url}/readyz`)
      expect(await ready.json()).toEqual({ status: 'ready', checks: { postgres: 'ok', redis: 'ok' } })

      const body = '{"type":"invoice.paid","id":"in_1"}'
      const response = await fetch(`${child.url}/webhooks/acme`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: 'evt_cli_1' }),
      })
      expect(response.status).toBe(200)
      await expect
        .poll(
          async () =>
            (await database.db.select().from(inboundEvents).where(eq(inboundEvents.eventId, 'evt_cli_1')))[0]
              ?.status,
          { timeout: 15_000 },
        )
        .toBe('done')
      expect(sink.received.map((r) => r.body)).toEqual([body])

      // The secret and the signature never reach the logs.
      expect(child.output()).not.toContain(TEST_SECRET)
      expect(child.output()).not.toContain(
        signedHeaders(body, { id: 'evt_cli_1' })['webhook-signature'] ?? 'x',
      )

      // SIGTERM: a graceful stop.
      expect(await child.kill('SIGTERM')).toBe(0)
      expect(child.output()).toContain('hookledger stopped')
    } finally {
      await child?.kill()
      await sink.close()
    }
  })

  it('runs api and worker as separate processes on one Postgres and one Redis', async () => {
    const sink = await startSink(() => ({ status: 200 }))
    const configPath = writeConfig('roles.json', {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sink.url },
        },
      ],
    })
    const env = { DATABASE_URL: database.url, REDIS_URL: testRedisUrl() }
    const api = await startChild([CLI, 'serve', '--role', 'api', '--config', configPath], env)
    const worker = await startChild([CLI, 'serve', '--role', 'worker', '--config', configPath], env)
    try {
      // The worker answers health checks but receives nothing.
      expect((await fetch(`${worker.url}/readyz`)).status).toBe(200)
      expect((await fetch(`${worker.url}/webhooks/acme`, { method: 'POST', body: '{}' })).status).toBe(404)
      const body = '{"type":"split.roles"}'
      const response = await fetch(`${api.url}/webhooks/acme`, {
        method: 'POST',
        body,
        headers: signedHeaders(body, { id: 'evt_split_roles' }),
      })
      expect(response.status).toBe(200)
      await expect.poll(() => sink.received.length, { timeout: 15_000 }).toBe(1)
      expect(api.output()).not.toContain('hookledger worker started')
      expect(worker.output()).toContain('hookledger worker started')
    } finally {
      await api.kill()
      await worker.kill()
      await sink.close()
    }
  })

  it('answers /readyz with 503 naming a store it has not reached since its start', async () => {
    const configPath = writeConfig('ready.json', {
      sources: [{ id: 'acme', verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] } }],
    })
    const child = await startChild([CLI, 'serve', '--role', 'api', '--config', configPath], {
      DATABASE_URL: database.url,
      REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
    })
    try {
      const ready = await fetch(`${child.url}/readyz`)
      expect(ready.status).toBe(503)
      const answer = (await ready.json()) as { checks: Record<string, string> }
      expect(answer.checks.postgres).toBe('ok')
      expect(answer.checks.redis).not.toBe('ok')
    } finally {
      await child.kill()
    }
  })

  it('refuses to start on a bad environment, naming every bad variable', () => {
    const result = runCli(['serve'], {
      DATABASE_URL: 'mysql://nope',
      REDIS_URL: 'http://nope',
      PORT: 'eighty',
    })
    expect(result.status).toBe(1)
    expect(result.stderr).toContain('DATABASE_URL: must be a postgres:// URL')
    expect(result.stderr).toContain(
      'REDIS_URL: must be a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL',
    )
    expect(result.stderr).toContain('PORT:')
  })

  it('refuses a port another process holds in one line, and exits instead of hanging on what it opened', async () => {
    const holder = createServer()
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve))
    const { port } = holder.address() as AddressInfo
    const configPath = writeConfig('port-taken.json', {
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
        },
      ],
    })
    try {
      // The whole start runs (migrations, ledger pool, queue) before the listen fails; spawnSync's
      // timeout fails the test if any of that keeps the process alive.
      const result = runCli(['serve', '--config', configPath], {
        DATABASE_URL: database.url,
        HOST: '127.0.0.1',
        PORT: String(port),
      })
      expect(result.status).toBe(1)
      expect(result.stderr.trimEnd()).toBe(
        `hookledger: invalid environment: PORT: 127.0.0.1:${port} is in use by another process; stop it or set another PORT`,
      )
    } finally {
      holder.close()
    }
  })

  it('refuses an api-only or worker-only process without Redis, naming REDIS_URL and the role', () => {
    for (const role of ['api', 'worker']) {
      const result = runCli(['serve', '--role', role], { DATABASE_URL: database.url })
      expect(result.status).toBe(1)
      expect(result.stderr).toContain(`REDIS_URL: is required for --role ${role}`)
    }
  })

  it('refuses to start on a bad config file, naming the source and the field', () => {
    const configPath = writeConfig('bad.json', {
      sources: [
        {
          id: 'good',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: 'http://127.0.0.1:1/' },
        },
        { id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_SECRET'] } },
        { id: 'typo', verify: { scheme: 'standard-webhook', secrets: [TEST_SECRET] } },
      ],
    })
    const result = runCli(['serve', '--config', configPath], {
      DATABASE_URL: database.url,
      REDIS_URL: testRedisUrl(),
    })
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("source 'typo': verify.scheme")
    const secretsProblem = runCli(
      [
        'serve',
        '--config',
        writeConfig('secret.json', {
          sources: [{ id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_SECRET'] } }],
        }),
      ],
      { DATABASE_URL: database.url, REDIS_URL: testRedisUrl() },
    )
    expect(secretsProblem.status).toBe(1)
    expect(secretsProblem.stderr).toContain(
      "source 'shop': verify.secrets[0]: environment variable SHOP_SECRET is not set",
    )
    const noHandler = runCli(
      [
        'serve',
        '--config',
        writeConfig('nohandler.json', {
          sources: [{ id: 'shop', verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] } }],
        }),
      ],
      { DATABASE_URL: database.url, REDIS_URL: testRedisUrl() },
    )
    expect(noHandler.status).toBe(1)
    expect(noHandler.stderr).toContain("source 'shop': handler: none configured")
  })

  it('rejects an unknown role and an unknown command with usage', () => {
    expect(runCli(['serve', '--role', 'boss'], {}).stderr).toContain('--role must be one of all, api, worker')
    const unknown = runCli(['launch'], {})
    expect(unknown.status).toBe(2)
    expect(unknown.stderr).toContain("unknown command 'launch'")
  })
})

describe('hookledger migrate', () => {
  it('creates a missing database, applies the migrations, and is idempotent; replicas in parallel are safe', async () => {
    const name = `hl_test_migrate_${Date.now()}`
    const url = new URL(adminDatabaseUrl())
    url.pathname = `/${name}`
    const env = { DATABASE_URL: url.toString(), REDIS_URL: testRedisUrl() }
    const run = () =>
      new Promise<number | null>((resolve) => {
        const child = startMigrate(env)
        child.once('exit', resolve)
      })
    expect(await Promise.all([run(), run(), run()])).toEqual([0, 0, 0])
    expect(runCli(['migrate'], env).status).toBe(0)
    const admin = (await import('postgres')).default(url.toString(), { max: 1, onnotice: () => {} })
    try {
      const tables = await admin`select count(*)::int as n from deployment`
      expect(tables[0]?.n).toBe(1)
    } finally {
      await admin.end()
      const drop = (await import('postgres')).default(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
      await drop.unsafe(`drop database if exists "${name}" with (force)`)
      await drop.end()
    }
  })
})

function startMigrate(env: Record<string, string>) {
  return spawn(process.execPath, [CLI, 'migrate'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', ...env },
    stdio: 'ignore',
  })
}
