import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './child.js'

/** A PgBouncer of the test's own, in transaction mode, on a free loopback port. */
export interface PgBouncer {
  port: number
  /** `url` through this PgBouncer (its host and port replaced), marked `?pgbouncer=true` for hookledger. */
  urlFor(url: string): string
  /**
   * Its log so far, for a failure message: repeated lines (which differ only in time, client port
   * and connection id) folded into one with their count and first time, so the first cause of a
   * burst is not cut off by its thousand echoes.
   */
  log(): string
  close(): Promise<void>
}

const BINARY = '/usr/sbin/pgbouncer'

function pgbouncerBinary(): string {
  for (const candidate of ['pgbouncer', BINARY]) {
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' })
      return candidate
    } catch {}
  }
  throw new Error(
    'pgbouncer is not installed: the PgBouncer tests need it (apt-get install pgbouncer, Debian/Ubuntu)',
  )
}

/**
 * Starts pgbouncer (a child process, killed by `close`) with `pool_mode = transaction` in front of
 * `upstream`, every database name passed through, trust auth for `user`. PgBouncer refuses to run
 * as root, so under root it runs as the `postgres` user (`-u`), which the Debian package creates.
 */
export async function startPgBouncer(options: {
  upstream: { host: string; port: number }
  user: string
  /** Server connections per database and user. */
  poolSize?: number
}): Promise<PgBouncer> {
  const binary = pgbouncerBinary()
  const directory = mkdtempSync(join(tmpdir(), 'hookledger-pgbouncer-'))
  const port = await freePort()
  writeFileSync(join(directory, 'userlist.txt'), `"${options.user}" ""\n`)
  writeFileSync(
    join(directory, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${options.upstream.host} port=${options.upstream.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(directory, 'userlist.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${options.poolSize ?? 20}`,
      'max_client_conn = 500',
      // After a server login fails (a reset during one counts), PgBouncer refuses new clients until a
      // login succeeds, and tries one again only after this long (default 15 s), as README advises.
      'server_login_retry = 1',
      // One login in progress at a time per pool: one that hangs holds up the pool's every new server
      // connection until this passes (default 15 s), as README advises too.
      'server_connect_timeout = 5',
      'log_connections = 0',
      'log_disconnections = 0',
    ].join('\n'),
  )
  const asRoot = process.getuid?.() === 0
  if (asRoot) {
    const ids = execFileSync('id', ['-u', 'postgres']).toString().trim()
    const gid = execFileSync('id', ['-g', 'postgres']).toString().trim()
    chownSync(directory, Number(ids), Number(gid))
  }
  const child: ChildProcess = spawn(
    binary,
    [...(asRoot ? ['-u', 'postgres'] : []), join(directory, 'pgbouncer.ini')],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const deadline = Date.now() + 10_000
  while (!(await accepts(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL')
      rmSync(directory, { recursive: true, force: true })
      throw new Error(`pgbouncer did not start:\n${output}`)
    }
    await new Promise((wake) => setTimeout(wake, 50))
  }
  return {
    port,
    urlFor(url) {
      const through = new URL(url)
      through.hostname = '127.0.0.1'
      through.port = String(port)
      through.searchParams.set('pgbouncer', 'true')
      return through.toString()
    },
    log: () => foldRepeats(output),
    async close() {
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
      rmSync(directory, { recursive: true, force: true })
    },
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

function foldRepeats(log: string): string {
  const seen = new Map<string, { first: string; count: number }>()
  for (const line of log.split('\n')) {
    if (line.trim() === '') continue
    const time = /^\S+ (\S+)/.exec(line)?.[1] ?? ''
    const shape = line
      .replace(/^\S+ \S+ \S+ \[\d+\] /, '')
      .replace(/[CS]-0x[0-9a-f]+/g, 'X')
      .replace(/@127\.0\.0\.1:\d+/g, '@127.0.0.1')
    const entry = seen.get(shape)
    if (entry) entry.count += 1
    else seen.set(shape, { first: time, count: 1 })
  }
  return [...seen].map(([shape, { first, count }]) => `${first} ×${count} ${shape}`).join('\n')
}
