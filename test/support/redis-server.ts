import { type ChildProcess, spawn } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort } from './child.js'

/**
 * A redis-server of the test's own, so the test can stop it without touching anyone else's.
 * `extraArgs` are more redis-server options (`--maxmemory-policy allkeys-lru`).
 */
export async function startRedisServer(port?: number, extraArgs: readonly string[] = []) {
  const listenPort = port ?? (await freePort())
  const server: ChildProcess = spawn(
    'redis-server',
    ['--port', String(listenPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs],
    { stdio: 'ignore' },
  )
  const url = `redis://127.0.0.1:${listenPort}`
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
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
    async stop() {
      const exited = new Promise((resolve) => server.once('exit', resolve))
      server.kill('SIGKILL')
      await exited
    },
  }
}
