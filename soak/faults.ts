// The soak's fault scheduler: the faults the project tests one by one, mixed under load, in a
// shuffled round after round, one every `spacingMs`, so each happens a few times over a run.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import type { SoakDestination } from './destination.js'
import type { Load } from './load.js'
import { ROUTE, SOURCE, type Stack } from './stack.js'

const run = promisify(execFile)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export interface Faults {
  /** Fault name → times injected. */
  counts: Map<string, number>
  /** Fault name → times it could not be injected as meant (with the last reason). */
  problems: Map<string, string>
  /** Agent operation keys claimed and reported `unknown`. */
  agentKeys: string[]
}

interface Context {
  stack: Stack
  destination: SoakDestination
  load: Load
  faults: Faults
}

/** `hookledger <args>` on the built dist, with the service's environment. */
export async function cli(
  stack: Stack,
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['bin/hookledger.js', ...args], {
      env: { ...process.env, ...stack.env },
      timeout: 60_000,
      maxBuffer: 16 * 1024 * 1024,
    })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string }
    return {
      code: typeof failed.code === 'number' ? failed.code : 1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    }
  }
}

const FAULTS: Record<string, (context: Context) => Promise<void>> = {
  'kill -9 worker': async ({ stack }) => stack.killWorker(Math.floor(Math.random() * 2)),
  'kill -9 api': async ({ stack }) => stack.killApi(),
  'postgres reset': async ({ stack }) => {
    stack.proxy.reset()
  },
  'postgres blackhole 4s': async ({ stack }) => {
    stack.proxy.blackhole()
    await sleep(4000)
    stack.proxy.forward()
  },
  'redis killed 3s': async ({ stack }) => stack.killRedis(),
  'redis flushall': async ({ stack }) => {
    const redis = new Redis(stack.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true })
    redis.on('error', () => {})
    try {
      await redis.connect()
      await redis.flushall()
    } finally {
      redis.disconnect()
    }
  },
  'destination 500 for 5s': async ({ destination }) => {
    destination.setMode('fail500')
    await sleep(5000)
    destination.setMode('ok')
  },
  'destination slow 3s for 6s': async ({ destination }) => {
    destination.setMode('slow')
    await sleep(6000)
    destination.setMode('ok')
  },
  'destination 410 then routes enable': async ({ stack, destination, faults }) => {
    destination.setMode('gone410')
    await sleep(2000)
    destination.setMode('ok')
    // The route is disabled by the first 410 a worker saw; enabling it is a person's step, done here
    // with the CLI as the README says. Bounded: 10 tries.
    for (let i = 0; i < 10; i += 1) {
      const result = await cli(stack, ['routes', 'enable', SOURCE, ROUTE])
      if (result.code === 0) {
        faults.problems.delete('destination 410 then routes enable')
        return
      }
      faults.problems.set('destination 410 then routes enable', result.stderr.trim().slice(0, 200))
      await sleep(1000)
    }
  },
  'duplicates (20, each sent twice at once)': async ({ load }) => {
    await load.resend(20, true)
  },
  'replays (20 re-sent)': async ({ load }) => {
    await load.resend(20, false)
  },
  'agents: irreversible, outcome unknown (5)': async ({ stack, faults }) => {
    for (let i = 0; i < 5; i += 1) await agentUnknown(stack, faults)
  },
}

export const FAULT_NAMES = Object.keys(FAULTS)

/** An agent claims an irreversible tool call and reports that it does not know what happened. */
async function agentUnknown(stack: Stack, faults: Faults) {
  const key = `soak_${faults.agentKeys.length + 1}_${Date.now()}`
  const headers = { authorization: `Bearer ${stack.agentToken}`, 'content-type': 'application/json' }
  const base = `${stack.apiUrl()}/v1/operations`
  const claim = await fetch(`${base}/claim`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ key, tool: 'soak.charge', effect: 'irreversible', args: { amount: 100 } }),
    signal: AbortSignal.timeout(20_000),
  })
  const claimed = (await claim.json()) as { decision?: string; leaseToken?: string; attempt?: number }
  if (claim.status !== 200 || claimed.decision !== 'execute') {
    faults.problems.set('agent claim', `${claim.status} ${JSON.stringify(claimed).slice(0, 200)}`)
    return
  }
  const outcome = await fetch(`${base}/${encodeURIComponent(key)}/outcome`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      leaseToken: claimed.leaseToken,
      attempt: claimed.attempt,
      outcome: 'unknown',
      error: 'soak: timed out',
    }),
    signal: AbortSignal.timeout(20_000),
  })
  await outcome.text()
  if (outcome.status !== 200) faults.problems.set('agent outcome', String(outcome.status))
  faults.agentKeys.push(key)
}

/**
 * Injects faults until `untilMs` (epoch ms), one every `spacingMs`, each round a shuffle of every
 * fault. A fault that throws is noted (the soak goes on: the end checks decide).
 */
export async function runFaults(
  context: Omit<Context, 'faults'>,
  untilMs: number,
  spacingMs: number,
): Promise<Faults> {
  const faults: Faults = { counts: new Map(), problems: new Map(), agentKeys: [] }
  let round: string[] = []
  while (Date.now() + spacingMs < untilMs) {
    await sleep(spacingMs)
    if (round.length === 0) round = [...FAULT_NAMES].sort(() => Math.random() - 0.5)
    const name = round.pop()
    const fault = name === undefined ? undefined : FAULTS[name]
    if (name === undefined || fault === undefined) continue
    try {
      await fault({ ...context, faults })
      faults.counts.set(name, (faults.counts.get(name) ?? 0) + 1)
    } catch (error) {
      faults.problems.set(name, error instanceof Error ? error.message.slice(0, 300) : String(error))
    }
  }
  return faults
}
