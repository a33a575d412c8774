// `npm run soak`: the real service (built dist: one `--role api`, two `--role worker` processes) on a
// database, proxy, redis-server and queue prefix of its own, under a steady signed load, while a
// scheduler mixes the faults the project tests one by one. Then the load stops, the backlog drains
// (bounded) and the checks run, `hookledger doctor` the last of them. Exit 1 if any check fails.
//   SOAK_SECONDS (or --seconds N): how long faults are injected (default 600)
//   SOAK_RATE: deliveries per second (default 50)
// Every loop is bounded in count and time; all traffic stays on 127.0.0.1; everything it started is
// stopped and removed at the end, also on a failure or Ctrl-C.
import { runChecks, type Verdict, waitForDrain, watchSessions } from './checks.js'
import { startSoakDestination } from './destination.js'
import { FAULT_NAMES, type Faults, runFaults } from './faults.js'
import { startLoad } from './load.js'
import { SOURCE, type Stack, startStack } from './stack.js'

const flag = process.argv.indexOf('--seconds')
const SECONDS = Number(flag >= 0 ? process.argv[flag + 1] : (process.env.SOAK_SECONDS ?? 600))
const RATE = Number(process.env.SOAK_RATE ?? 50)
const DRAIN_TIMEOUT_MS = 180_000
// Retries of deliveries that met a fault end within ~90 s (load.ts); this bounds the wait for them.
const RETRY_TIMEOUT_MS = 120_000
if (!Number.isFinite(SECONDS) || SECONDS < 10) throw new Error('SOAK_SECONDS must be a number ≥ 10')

const cleanups: Array<() => Promise<void>> = []
let cleaning: Promise<void> | undefined
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse()) await step().catch(() => {})
  })()
  return cleaning
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\nsoak: ${signal}, cleaning up`)
    void cleanUp().finally(() => process.exit(130))
  })
}

function table(map: Map<string, number>): string {
  return [...map]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, count]) => `  ${name.padEnd(44)} ${count}`)
    .join('\n')
}

async function main(): Promise<boolean> {
  const started = Date.now()
  const destination = await startSoakDestination()
  cleanups.push(() => destination.close())
  const stack: Stack = await startStack(destination.url)
  cleanups.push(() => stack.close())
  const sessions = watchSessions(stack)
  cleanups.push(async () => sessions.stop())
  // Spacing: each fault about twice at the default length; never closer than 4 s.
  const spacingMs = Math.max(4000, Math.floor((SECONDS * 1000) / (FAULT_NAMES.length * 2 + 1)))
  console.log(
    `soak: ${SECONDS} s of faults, ${RATE} deliveries/s, a fault every ${spacingMs / 1000} s; ` +
      `database ${stack.database.name}, redis ${stack.redisUrl}, queue prefix ${stack.prefix}`,
  )
  const load = startLoad(`${stack.apiUrl()}/webhooks/${SOURCE}`, RATE, RATE * 4)
  const loadEnds = Date.now() + SECONDS * 1000
  let faults: Faults
  try {
    faults = await runFaults({ stack, destination, load }, loadEnds, spacingMs)
  } finally {
    // Whatever happened, leave the network and the destination healthy for the drain.
    stack.proxy.forward()
    destination.setMode('ok')
  }
  // The load goes on to its end (the last fault may end up to one spacing earlier).
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, loadEnds - Date.now())))
  const faultsEnded = Date.now()
  await load.stop(RETRY_TIMEOUT_MS)
  const retriesSeconds = (Date.now() - faultsEnded) / 1000
  const drain = await waitForDrain(stack, load.stats, destination, DRAIN_TIMEOUT_MS)
  const drainSeconds = (Date.now() - faultsEnded) / 1000
  sessions.stop()
  const verdicts: Verdict[] = await runChecks(stack, load.stats, destination, faults.agentKeys, sessions)
  verdicts.unshift({
    name: 'backlog drained',
    ok: drain.ms !== undefined,
    detail:
      drain.ms === undefined
        ? `not within ${DRAIN_TIMEOUT_MS / 1000} s of the last retry`
        : `${drainSeconds.toFixed(1)} s after the load stopped (its retries included)`,
  })
  const forwards = [...destination.taken.values()]
  const repeats = forwards.reduce((sum, n) => sum + n - 1, 0)
  const failed = await stack.database.sql<{ n: number }[]>`
    select count(*)::int as n from inbound_events where status = 'failed'`
  const lines = [
    `hookledger soak — ${SECONDS} s of faults at ${RATE} deliveries/s, 1 api + 2 worker processes`,
    '',
    'faults injected:',
    table(faults.counts),
    ...(faults.problems.size > 0
      ? ['fault notes:', table(new Map([...faults.problems].map(([k, v]) => [`${k}: ${v}`, 1])))]
      : []),
    '',
    `deliveries: ${load.stats.answered200.size} ids answered 200, ${load.stats.sent} requests, ${load.stats.skipped} skipped (in flight at the cap), ${load.stats.gaveUp.size} given up after 12 tries`,
    'answers:',
    table(load.stats.outcomes),
    '',
    `forwards: ${destination.taken.size} unique, ${repeats} repeats; destination answers: ${[...destination.answers].map(([s, n]) => `${n}×${s}`).join(', ')}`,
    `events FAILED: ${failed[0]?.n ?? 0}; agent operations reported unknown: ${faults.agentKeys.length}`,
    `time to drain: ${drainSeconds.toFixed(1)} s after the load stopped: ${retriesSeconds.toFixed(1)} s for the load's last retries, then ${(drainSeconds - retriesSeconds).toFixed(1)} s for the ledger; whole run ${((Date.now() - started) / 1000).toFixed(0)} s`,
    ...(drain.samples.length === 0
      ? []
      : [
          'what the drain waited for (s after the retries: answered 200 not yet forwarded; events pending, never attempted; pending after an attempt; processing):',
          ...drain.samples.map(
            (s) =>
              `  ${(s.atMs / 1000).toFixed(1).padStart(6)}  ${s.unforwarded}  ${s.pendingUnattempted}  ${s.pendingRetrying}  ${s.processing}`,
          ),
        ]),
    '',
    'checks:',
    ...verdicts.map((verdict) => `  ${verdict.ok ? 'PASS' : 'FAIL'}  ${verdict.name}: ${verdict.detail}`),
  ]
  console.log(lines.join('\n'))
  const ok = verdicts.every((verdict) => verdict.ok)
  if (!ok && process.env.SOAK_SHOW_LOGS === '1') console.log(stack.outputs())
  return ok
}

let ok = false
try {
  ok = await main()
} catch (error) {
  console.error('soak: aborted:', error)
} finally {
  await cleanUp()
}
process.exit(ok ? 0 : 1)
