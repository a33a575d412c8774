import { type ChildProcess, spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject()))
    })
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
