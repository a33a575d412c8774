import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseEnv } from 'node:util'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runningEmbeddedUrl } from '../../src/db/embedded.js'
import { type Child, startChild } from '../support/child.js'
import { runCommand } from '../support/run-command.js'
import { signedHeaders } from '../support/signing.js'

// The examples as a newcomer runs them: no PostgreSQL, no Redis, nothing exported but what the
// comment at the top of each says. Each runs in embedded mode on a data folder of its own.
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const EMBEDDED = { DATABASE_URL: '', REDIS_URL: '' }
const EXAMPLE_SECRET = parseEnv(readFileSync(join(ROOT, 'example.env'), 'utf8')).EXAMPLE_WEBHOOK_SECRET ?? ''
const RUNTIME_HOME = '/var/lib/hookledger'
const runtimeCopies = () =>
  existsSync(RUNTIME_HOME) ? readdirSync(RUNTIME_HOME).filter((name) => name.startsWith('runtime-')) : []

let folder: string
let copiesBefore: string[]
let example: Child | undefined

beforeAll(() => {
  copiesBefore = runtimeCopies()
  folder = mkdtempSync(join(tmpdir(), 'hookledger-examples-'))
  chmodSync(folder, 0o755) // open to the `postgres` user when the suite runs as root
})
afterAll(async () => {
  await example?.kill('SIGKILL')
  rmSync(folder, { recursive: true, force: true })
  for (const copy of runtimeCopies()) {
    if (!copiesBefore.includes(copy)) rmSync(join(RUNTIME_HOME, copy), { recursive: true, force: true })
  }
})

function runNode(args: string[], env: Record<string, string>, cwd = ROOT) {
  return runCommand(process.execPath, args, { cwd, env })
}

describe('examples/ in embedded mode', () => {
  it('code-handler.mjs runs with no server, writes once, and stops cleanly on Ctrl-C (SIGINT)', async () => {
    const dataDir = join(folder, 'code-handler')
    example = await startChild(['examples/code-handler.mjs'], { ...EMBEDDED, HOOKLEDGER_DATA_DIR: dataDir })
    const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_7', amount: 700 } })
    for (const expected of ['accepted', 'duplicate']) {
      const response = await fetch(`${example.url}/webhooks/shop`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...signedHeaders(body, { id: 'msg_embedded_1', secret: EXAMPLE_SECRET }),
        },
        body,
      })
      expect(await response.json()).toMatchObject({ status: expected })
    }
    const url = await runningEmbeddedUrl(dataDir)
    expect(url).toBeDefined()
    const sql = postgres(url ?? '', { max: 1, onnotice: () => {} })
    try {
      const rows = () => sql<{ invoice_id: string }[]>`select invoice_id from paid_invoices`.catch(() => [])
      await expect.poll(rows, { timeout: 20_000 }).toEqual([{ invoice_id: 'in_7' }])
    } finally {
      await sql.end()
    }
    // Ctrl-C: the service closes (exit 0), its embedded PostgreSQL stops and the folder's lock goes.
    expect(await example.kill('SIGINT')).toBe(0)
    expect(existsSync(join(dataDir, 'hookledger.pid'))).toBe(false)
    expect(await runningEmbeddedUrl(dataDir)).toBeUndefined()
  }, 90_000)

  it('code-handler.mjs answers a secret that is not one (the README placeholder) in one line', async () => {
    const run = await runNode(['examples/code-handler.mjs'], {
      ...EMBEDDED,
      HOOKLEDGER_DATA_DIR: join(folder, 'never-started'),
      SHOP_WEBHOOK_SECRET: 'whsec_…',
    })
    expect(run.status).toBe(1)
    expect(run.stderr).toMatch(
      /^code-handler example: .*source 'shop'.*SHOP_WEBHOOK_SECRET|^code-handler example: .*secrets/,
    )
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1)
  })

  it('receiver.test.mjs passes with no server, on a data folder of its own in the working folder', async () => {
    const cwd = join(folder, 'project')
    rmSync(cwd, { recursive: true, force: true })
    mkdirSync(cwd, { mode: 0o755 })
    const run = await runNode(['--test', join(ROOT, 'examples/receiver.test.mjs')], EMBEDDED, cwd)
    expect(run.stdout).toMatch(/^# pass 2$/m)
    expect(run.stdout).toMatch(/^# fail 0$/m)
    expect(run.status).toBe(0)
    // Its own folder: not ./.hookledger, the one `npm start` owns.
    expect(existsSync(join(cwd, '.hookledger-receiver-test'))).toBe(true)
    expect(existsSync(join(cwd, '.hookledger'))).toBe(false)
  }, 90_000)
})
