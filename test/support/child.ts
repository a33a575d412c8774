import { type ChildProcess, spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/**
 * Ports a test hands to a child or server it starts: below the kernel's ephemeral range (32768 up),
 * so no outgoing connection of this machine (to PostgreSQL, Redis, a destination) can take one in
 * the moment between this check and the child's own bind, as a port the kernel lent for port 0 can.
 * A port this process handed out once is not handed out again, so two children of one run never
 * race for one; another run on the machine picks from 12,000 at random.
 */
const TEST_PORTS = { from: 20_000, to: 32_000 }
const handedOut = new Set<number>()

export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 100; tries += 1) {
    const port = TEST_PORTS.from + Math.floor(Math.random() * (TEST_PORTS.to - TEST_PORTS.from))
    if (handedOut.has(port)) continue
    if (await bindable(port)) {
      handedOut.add(port)
      return port
    }
  }
  throw new Error(`no free port between ${TEST_PORTS.from} and ${TEST_PORTS.to} in 100 tries`)
}

/** Whether nothing listens on the port now (a listener on 127.0.0.1 or on every address). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

export interface Child {
  process: ChildProcess
  url: string
  output: () => string
  /** Resolves with the signal (or exit code) the process ended with. */
  exited: Promise<NodeJS.Signals | number | null>
  kill(signal?: NodeJS.Signals): Promise<NodeJS.Signals | number | null>
}

/**
 * Starts a hookledger process and waits until it answers /healthz. `entry` is JavaScript on the
 * built dist/ (bin/hookledger.js, test/support/*.mjs, examples/): the suite's global setup builds it
 * once, where compiling TypeScript in each child cost seconds per start.
 */
export async function startChild(
  entry: string[],
  env: Record<string, string>,
  port?: number,
  /** Leader of a process group of its own, so a test can signal the group as a terminal does. */
  options: { detached?: boolean } = {},
): Promise<Child> {
  const listenPort = port ?? (await freePort())
  const child = spawn(process.execPath, entry, {
    cwd: ROOT,
    env: { ...process.env, PORT: String(listenPort), HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached === true,
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ?? code))
  })
  const url = `http://127.0.0.1:${listenPort}`
  const deadline = Date.now() + 30_000
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`child exited before it was ready:\n${output}`)
    }
    if (await answers(`${url}/healthz`)) break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`child not ready within 30 s:\n${output}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return {
    process: child,
    url,
    output: () => output,
    exited,
    async kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      return exited
    },
  }
}

async function answers(url: string): Promise<boolean> {
  try {
    return (await fetch(url)).ok
  } catch {
    return false
  }
}
