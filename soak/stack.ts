// What the soak runs and breaks: a database of its own behind a TCP proxy of its own, a redis-server
// of its own, and the built service as one api and two worker processes on fixed ports (so a killed
// one comes back at the same address).
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Child, freePort, startChild } from '../test/support/child.js'
import { createTestDatabase, type TestDatabase } from '../test/support/database.js'
import { startRedisServer } from '../test/support/redis-server.js'
import { startTcpProxy, type TcpProxy } from '../test/support/tcp-proxy.js'
import { SOAK_SECRET } from './load.js'

export const SOURCE = 'soak'
export const ROUTE = 'main'
const ENTRY = ['bin/hookledger.js', 'serve', '--role']
const WORKER_CONCURRENCY = 16

type Redis = Awaited<ReturnType<typeof startRedisServer>>

export interface Stack {
  database: TestDatabase
  proxy: TcpProxy
  redisUrl: string
  prefix: string
  agentToken: string
  workerConcurrency: number
  /** The environment of the service and of the CLI (the CLI goes through the proxy too). */
  env: Record<string, string>
  apiUrl(): string
  killApi(): Promise<void>
  killWorker(index: number): Promise<void>
  killRedis(): Promise<void>
  /** Every process's output, for a failed run's report. */
  outputs(): string
  close(): Promise<void>
}

/** Starts everything; on a failure part-way, stops what had started before rethrowing. */
export async function startStack(destinationUrl: string): Promise<Stack> {
  const undo: Array<() => Promise<void>> = []
  const close = async () => {
    for (const step of undo.reverse()) await step().catch(() => {})
  }
  try {
    const folder = mkdtempSync(join(tmpdir(), 'hookledger-soak-'))
    undo.push(async () => rmSync(folder, { recursive: true, force: true }))
    const database = await createTestDatabase()
    undo.push(() => database.drop())
    const proxy = await startTcpProxy()
    undo.push(() => proxy.close())
    const redisPort = await freePort()
    let redis: Redis | undefined = await startRedisServer(redisPort)
    undo.push(async () => redis?.stop())
    const prefix = `hl-soak-${randomBytes(4).toString('hex')}`
    const agentToken = randomBytes(24).toString('hex')
    const configPath = join(folder, 'config.json')
    writeFileSync(
      configPath,
      JSON.stringify({
        sources: [
          {
            id: SOURCE,
            verify: { scheme: 'standard-webhooks', secrets: [SOAK_SECRET] },
            routes: [{ id: ROUTE, forward: { url: destinationUrl, timeoutMs: 10_000 } }],
          },
        ],
        // Retries, takeovers and rechecks within the soak's patience, not production's.
        worker: {
          concurrency: WORKER_CONCURRENCY,
          maxAttempts: 20,
          backoffBaseMs: 200,
          backoffMaxMs: 4000,
          handlerTimeoutMs: 12_000,
          leaseMs: 15_000,
          stalledIntervalMs: 2000,
        },
        relay: { intervalMs: 500, graceMs: 1000, orphanAfterMs: 5000 },
        delivery: { pausedRecheckMs: 2000 },
        queue: { prefix },
      }),
    )
    const env = {
      DATABASE_URL: proxy.urlFor(database.url),
      REDIS_URL: redis.url,
      HOOKLEDGER_CONFIG: configPath,
      AGENT_TOKEN: agentToken,
      LOG_LEVEL: 'warn',
    }
    const ports = { api: await freePort(), workers: [await freePort(), await freePort()] }
    const logs: string[] = []
    const start = async (role: 'api' | 'worker', port: number) => startChild([...ENTRY, role], env, port)
    let api: Child = await start('api', ports.api)
    const workers: Child[] = [
      await start('worker', ports.workers[0] ?? 0),
      await start('worker', ports.workers[1] ?? 0),
    ]
    undo.push(async () => {
      for (const child of [api, ...workers]) await child.kill('SIGKILL')
    })
    const restart = async (child: Child, role: 'api' | 'worker', port: number) => {
      logs.push(child.output())
      await child.kill('SIGKILL')
      return start(role, port)
    }
    return {
      database,
      proxy,
      redisUrl: redis.url,
      prefix,
      agentToken,
      workerConcurrency: WORKER_CONCURRENCY,
      env,
      apiUrl: () => api.url,
      async killApi() {
        api = await restart(api, 'api', ports.api)
      },
      async killWorker(index) {
        const child = workers[index]
        const port = ports.workers[index]
        if (child === undefined || port === undefined) throw new Error(`no worker ${index}`)
        workers[index] = await restart(child, 'worker', port)
      },
      async killRedis() {
        await redis?.stop()
        redis = undefined
        await new Promise((resolve) => setTimeout(resolve, 3000))
        redis = await startRedisServer(redisPort)
      },
      outputs: () => [...logs, api.output(), ...workers.map((worker) => worker.output())].join('\n'),
      close,
    }
  } catch (error) {
    await close()
    throw error
  }
}
