import { type ChildProcess, spawn } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort } from './child.js'

/**
 * A redis-server of the test's own, so the test can stop it without touching anyone else's.
 * `args` are more redis-server options, e.g. `['--maxmemory-policy', 'allkeys-lru']`.
 */
export async function startRedisServer(port?: number, args: readonly string[] = []) {
  const listenPort = port ?? (await freePort())
  const server: ChildProcess = spawn(
    'redis-server',
    ['--port', String(listenPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...args],
    { stdio: 'ignore' },
  )
  const url = `redis://127.0.0.1:${listenPort}`
  // No ready check: it is an INFO, which a test's server may have disabled.
  const probe = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
  })
  probe.on('error', () => {})
  const deadline = Date.now() + 10_000
  for (;;) {
    try {
      await probe.connect()
      await probe.ping()
      probe.disconnect()
      break
    } catch {
      if (Date.now() > deadline) throw new Error(`redis-server on ${listenPort} did not start`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  return {
    url,
    port: listenPort,
    /** Stops the server without closing its connections (SIGSTOP): a Redis that no longer answers. */
    freeze() {
      server.kill('SIGSTOP')
    },
    thaw() {
      server.kill('SIGCONT')
    },
    async stop() {
      server.kill('SIGCONT')
      const exited = new Promise((resolve) => server.once('exit', resolve))
      server.kill('SIGKILL')
      await exited
    },
  }
}
