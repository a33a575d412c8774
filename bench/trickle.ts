// The trickle section of `npm run bench`: a steady, low rate of signed deliveries into a whole system
// (receiver and worker in one process), as most webhook traffic arrives: one event at a time, never a
// backlog. Each body carries its sending time (bench/signing.ts); the destination times the forward's
// arrival against it, so the latency is from the request leaving the client to the forward arriving.
import { performance } from 'node:perf_hooks'
import type postgres from 'postgres'
import { Pool } from 'undici'
import type { Child } from '../test/support/child.js'
import { startSystemCpu } from './cpu.js'
import type { Destination } from './destination.js'
import { type LedgerCost, startLedgerCost } from './ledger-cost.js'
import { SMALL_BODY_BYTES, signedRequest } from './signing.js'

export interface TrickleOptions {
  /** Requests per second, sent on a fixed schedule whatever the answers take (an open loop). */
  rate: number
  seconds: number
  destination: Destination
  admin: postgres.Sql
  /** The system's own database (superuser URL: the cost meter reads the WAL). */
  databaseUrl: string
  databaseName: string
}

export interface TrickleResult {
  sent: number
  accepted: number
  non2xx: number
  errors: number
  /** Requests per second the schedule achieved (the client shares the cores too). */
  sentPerSecond: number
  /** Sending to the forward's arrival, ms. */
  p50Ms: number
  p99Ms: number
  maxMs: number
  /** The system's process, from the first request to the last forward, per accepted event. */
  cpuMsPerEvent: number
  /** This database's PostgreSQL backends over the same span. */
  postgresCpuMsPerEvent: number
  /** redis-server over the same span: the whole server, so other work on the machine is in it. */
  redisCpuMsPerEvent: number
  cost: LedgerCost
  repeats: number
}

/** Starts the system, trickles the deliveries into it, waits for every accepted one to be forwarded, stops it. */
export async function runTrickle(
  options: TrickleOptions,
  start: () => Promise<Child>,
): Promise<TrickleResult> {
  const { destination } = options
  const child = await start()
  const client = new Pool(child.url, { connections: 16 })
  const meter = await startLedgerCost(options.databaseUrl)
  try {
    destination.reset({ latencies: true })
    const total = Math.round(options.rate * options.seconds)
    const systemCpu = await startSystemCpu(child.process.pid, options)
    let accepted = 0
    let non2xx = 0
    let errors = 0
    const send = async () => {
      const request = signedRequest({ bytes: SMALL_BODY_BYTES, sentAt: performance.now() })
      try {
        const answer = await client.request({ path: '/webhooks/bench', ...request, headersTimeout: 10_000 })
        await answer.body.dump()
        if (answer.statusCode >= 200 && answer.statusCode < 300) accepted += 1
        else non2xx += 1
      } catch {
        errors += 1
      }
    }
    const requests: Promise<void>[] = []
    const startedAt = performance.now()
    // Bounded in count (total) and in time: a schedule that falls far behind stops sending.
    const stopAt = startedAt + (options.seconds + 10) * 1000
    while (requests.length < total && performance.now() < stopAt) {
      const due = Math.min(total, Math.floor(((performance.now() - startedAt) * options.rate) / 1000) + 1)
      while (requests.length < due) requests.push(send())
      await new Promise((resolve) => setTimeout(resolve, 1))
    }
    const sentPerSecond = requests.length / ((performance.now() - startedAt) / 1000)
    await Promise.all(requests)
    await destination.waitFor(accepted, 60_000)
    const cpu = await systemCpu.stop(accepted)
    const latencies = destination.latencies().sort((a, b) => a - b)
    const at = (quantile: number) => latencies[Math.floor(quantile * (latencies.length - 1))] ?? Number.NaN
    const repeats = destination.repeats()
    await child.kill('SIGTERM')
    // Backends report their counts when they exit; give them a moment to.
    await new Promise((resolve) => setTimeout(resolve, 1200))
    return {
      sent: requests.length,
      accepted,
      non2xx,
      errors,
      sentPerSecond,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: latencies.at(-1) ?? Number.NaN,
      cpuMsPerEvent: cpu.processMs,
      postgresCpuMsPerEvent: cpu.postgresMs ?? 0,
      redisCpuMsPerEvent: cpu.redisMs,
      cost: await meter.stop(),
      repeats,
    }
  } finally {
    await client.close()
    await child.kill('SIGTERM')
  }
}
