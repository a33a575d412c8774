import { execFile, spawn } from 'node:child_process'
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'
import { temporaryDirectory } from '../support/temp.js'

// hookledger as a dependency: `npm pack`, then `npm install ./hookledger-*.tgz` in a fresh project,
// as a user installs it. Its own dependencies come from the registry or npm's cache; optional ones
// (the embedded PostgreSQL binaries, ~30 MB) are left out to keep the install short.
const ROOT = resolve(import.meta.dirname, '../..')
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version
const run = promisify(execFile)
const folder = temporaryDirectory('hookledger-packed-')
const project = join(folder, 'project')
let database: TestDatabase
let proxy: TcpProxy

beforeAll(async () => {
  // --ignore-scripts: `prepare` (patch-package) belongs to a clone's install, not to packing; the
  // suite's global setup has built dist/.
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', folder], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
  })
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }]
  mkdirSync(project)
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'consumer', version: '1.0.0', type: 'module', private: true }),
  )
  await run(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--omit=optional', join(folder, filename)],
    { cwd: project, timeout: 240_000 },
  )
  copyFileSync(join(ROOT, 'test/support/driver-reset-consumer.mjs'), join(project, 'driver-reset.mjs'))
  database = await createTestDatabase()
  proxy = await startTcpProxy()
}, 300_000)
afterAll(async () => {
  await proxy?.close()
  await database?.drop()
})

describe('the packed package installed in a fresh project', () => {
  it('imports hookledger and hookledger/testing', async () => {
    writeFileSync(
      join(project, 'imports.mjs'),
      `import { buildConfig, readEnvironment, startService } from 'hookledger'
import { signDelivery } from 'hookledger/testing'
console.log([buildConfig, readEnvironment, startService, signDelivery].map((f) => typeof f).join(' '))`,
    )
    const { stdout } = await run(process.execPath, ['imports.mjs'], { cwd: project })
    expect(stdout.trim()).toBe('function function function function')
  })

  it('runs `npx hookledger --version` and `--help`', async () => {
    const version = await run('npx', ['--no-install', 'hookledger', '--version'], { cwd: project })
    expect(version.stdout).toBe(`${VERSION}\n`)
    const help = await run('npx', ['--no-install', 'hookledger', 'sign', '--help'], { cwd: project })
    expect(help.stdout).toMatch(/^usage:\n {2}hookledger sign/)
  })

  it('loads the patched postgres-js driver: resets under load fail statements, never the process', async () => {
    const child = spawn(process.execPath, ['driver-reset.mjs'], {
      cwd: project,
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: proxy.urlFor(database.url) },
    })
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    const ready = new Promise<void>((resolveReady) => {
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString()
        if (stdout.startsWith('ready\n')) resolveReady()
      })
    })
    const exited = new Promise<number | null>((resolveExit) => child.on('close', resolveExit))
    await ready
    let resets = 0
    for (let round = 0; round < 10; round += 1) {
      await new Promise((wake) => setTimeout(wake, 250))
      resets += proxy.reset()
    }
    expect(await exited, stderr).toBe(0)
    expect(resets).toBeGreaterThan(0)
    const report = JSON.parse(stdout.split('\n')[1] ?? '{}') as {
      driver: string
      recovered: number
      failures: string[]
      settled: boolean
    }
    expect(report.driver).toContain(join('node_modules', 'hookledger', 'node_modules', 'postgres'))
    // That copy is the patched one (the comment the patch adds to nextWrite).
    expect(readFileSync(join(report.driver, 'src', 'connection.js'), 'utf8')).toContain(
      'The socket closed after this write was scheduled',
    )
    expect(report.recovered).toBeGreaterThan(20)
    expect(report.settled).toBe(true)
    expect(report.failures.every((code) => code === 'CONNECTION_CLOSED' || code === 'ECONNRESET')).toBe(true)
  }, 60_000)
})
