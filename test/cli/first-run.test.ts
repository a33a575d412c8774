import { spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseEnv } from 'node:util'
import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import { TEST_SECRET } from '../support/signing.js'
import { temporaryDirectory } from '../support/temp.js'

// What a new user runs in a clean clone, with nothing exported by hand: the bin (what `npx
// hookledger` runs) builds dist/ if needed and reads ./example.env as `npm start` does.
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const FIXTURE = 'fixtures/standard-webhooks/invoice.paid.json'
const EXAMPLE_SECRET = parseEnv(readFileSync(join(ROOT, 'example.env'), 'utf8')).EXAMPLE_WEBHOOK_SECRET
const directory = temporaryDirectory('hookledger-first-run-')

function hookledger(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ['bin/hookledger.js', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

/** Checks the printed headers the way the receiver would, with `secret`. */
function verifiesWith(secret: string, stdout: string): boolean {
  const headers = Object.fromEntries(
    stdout
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 2)]),
  )
  try {
    new Webhook(secret).verify(readFileSync(join(ROOT, FIXTURE), 'utf8'), headers)
    return true
  } catch {
    return false
  }
}

describe('the CLI in a clean clone', () => {
  it('signs for the example source with the secret from ./example.env, nothing exported', () => {
    expect(EXAMPLE_SECRET).toMatch(/^whsec_/)
    const result = hookledger(['sign', '--source', 'example', FIXTURE])
    expect(result.stderr).toBe('')
    expect(result.status).toBe(0)
    expect(result.stdout).toMatch(/^webhook-signature: v1,/m)
    expect(verifiesWith(EXAMPLE_SECRET ?? '', result.stdout)).toBe(true)
  })

  it('reads --env-file instead, and a variable set in the environment wins over either file', () => {
    const envFile = join(directory, 'other.env')
    writeFileSync(envFile, `EXAMPLE_WEBHOOK_SECRET=${TEST_SECRET}\n`)
    const fromFile = hookledger(['sign', '--env-file', envFile, '--source', 'example', FIXTURE])
    expect(fromFile.status).toBe(0)
    expect(verifiesWith(TEST_SECRET, fromFile.stdout)).toBe(true)

    const fromEnvironment = hookledger(['sign', '--source', 'example', FIXTURE], {
      EXAMPLE_WEBHOOK_SECRET: TEST_SECRET,
    })
    expect(fromEnvironment.status).toBe(0)
    expect(verifiesWith(TEST_SECRET, fromEnvironment.stdout)).toBe(true)

    // Node 20 itself checks an `--env-file` it finds among a script's arguments and exits 9 with
    // `node: PATH: not found` before our own check can answer; either way the line names the file.
    const missing = hookledger([
      'sign',
      '--env-file',
      join(directory, 'nope.env'),
      '--source',
      'example',
      FIXTURE,
    ])
    expect(missing.status).not.toBe(0)
    expect(missing.stderr).toMatch(/nope\.env(: not found|: ENOENT)/)
  })

  it("needs only the secrets of the source it signs for: another source's missing secret does not block it", () => {
    const config = join(directory, 'two-sources.json')
    writeFileSync(
      config,
      JSON.stringify({
        sources: [
          { id: 'example', verify: { scheme: 'standard-webhooks', secrets: ['env:EXAMPLE_WEBHOOK_SECRET'] } },
          { id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_SECRET_NOT_SET'] } },
        ],
      }),
    )
    const signed = hookledger(['sign', '--config', config, '--source', 'example', FIXTURE])
    expect(signed.stderr).toBe('')
    expect(signed.status).toBe(0)
    expect(verifiesWith(EXAMPLE_SECRET ?? '', signed.stdout)).toBe(true)

    const unsigned = hookledger(['sign', '--config', config, '--source', 'shop', FIXTURE])
    expect(unsigned.status).toBe(1)
    expect(unsigned.stderr).toContain(
      "source 'shop': verify.secrets[0]: environment variable SHOP_SECRET_NOT_SET is not set",
    )
  })
})
