import { spawn } from 'node:child_process'
import { createConnection } from 'node:net'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { afterAll, describe, expect, it } from 'vitest'
import { adminDatabaseUrl } from '../support/env.js'
import { runCommand } from '../support/run-command.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
// The stores the soak's databases are made on (the suite's, when a machine points it elsewhere).
const STORES: Record<string, string> = Object.fromEntries(
  ['TEST_DATABASE_URL', 'TEST_REDIS_URL', 'HOME'].flatMap((name) => {
    const value = process.env[name]
    return value === undefined ? [] : [[name, value]]
  }),
)
const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })

async function databaseExists(name: string): Promise<boolean> {
  const rows = await admin`select 1 from pg_database where datname = ${name}`
  return rows.length > 0
}

/** Whether anything still listens at the soak's redis-server's address. */
function redisAnswers(output: string): Promise<boolean> {
  const port = /redis redis:\/\/127\.0\.0\.1:(\d+)/.exec(output)?.[1]
  if (port === undefined) throw new Error(`the soak did not name its redis-server:\n${output}`)
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port: Number(port) })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

function databaseOf(output: string): string {
  const name = /database (hl_test_[0-9a-f]+)/.exec(output)?.[1]
  if (name === undefined) throw new Error(`the soak did not name its database:\n${output}`)
  return name
}

afterAll(async () => {
  await admin.end({ timeout: 5 })
})

// `npm run soak` at CI's length: every check passes, and nothing of the run is left behind. The
// faults are the real ones (kill -9, proxy resets and blackholes, redis-server killed and flushed),
// so a broken guarantee fails one of the soak's checks and with it this test.
describe('the chaos soak (soak/run.ts)', () => {
  it('passes every check in a 40 s run and removes its database', { timeout: 300_000 }, async () => {
    const result = await runCommand(process.execPath, ['--import', 'tsx', 'soak/run.ts', '--seconds', '40'], {
      cwd: ROOT,
      env: STORES,
    })
    const report = `${result.stdout}\n${result.stderr}`
    expect(result.status, report).toBe(0)
    expect(report).toMatch(/PASS {2}hookledger doctor --json clean/)
    expect(report).not.toMatch(/^ +FAIL /m)
    expect(await databaseExists(databaseOf(report))).toBe(false)
    expect(await redisAnswers(report)).toBe(false)
  })

  it('cleans up on Ctrl-C (SIGINT) mid-run', { timeout: 120_000 }, async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'soak/run.ts', '--seconds', '600'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', ...STORES },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    const started = new Promise<void>((resolve) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString()
        if (output.includes('queue prefix')) resolve()
      })
    })
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    await Promise.race([started, exited])
    const name = databaseOf(output)
    expect(await databaseExists(name)).toBe(true)
    // Under load for a few seconds, then interrupted as a terminal would.
    await new Promise((resolve) => setTimeout(resolve, 5000))
    child.kill('SIGINT')
    expect(await exited, output).toBe(130)
    expect(await databaseExists(name)).toBe(false)
    expect(await redisAnswers(output)).toBe(false)
  })
})
