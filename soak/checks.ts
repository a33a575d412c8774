// The soak's end: wait (bounded) for the backlog to drain, then the checks, each a verdict.
import { connectionsBesidePool, processConnections } from '../src/db/client.js'
import type { DoctorReport } from '../src/doctor/run.js'
import type { SoakDestination } from './destination.js'
import { cli } from './faults.js'
import type { LoadStats } from './load.js'
import { ROUTE, SOURCE, type Stack } from './stack.js'

export interface Verdict {
  name: string
  ok: boolean
  detail: string
}

/** Codes this machine's PostgreSQL always has (autovacuum is off here); documented in the README. */
export const DOCTOR_IGNORES = ['postgres.autovacuum_off']
const SETTLED = ['completed', 'compensated', 'exhausted', 'failed', 'abandoned']

/** What the drain still waited for at one moment: ids answered 200 not yet forwarded, events open. */
export interface DrainSample {
  atMs: number
  unforwarded: number
  /** PENDING rows no attempt has leased yet: their job is queued, or lost. */
  pendingUnattempted: number
  /** PENDING rows after an attempt: a retry waiting out its backoff, or a paused route. */
  pendingRetrying: number
  processing: number
}

export interface Drain {
  /** Until every id answered 200 reached the destination and no event is open; undefined if the wait ran out. */
  ms: number | undefined
  /** A sample every DRAIN_SAMPLE_MS while the wait lasts (the first at once), so a slow drain says what it waited on. */
  samples: DrainSample[]
}

const DRAIN_SAMPLE_MS = 5000

/**
 * The service's PostgreSQL sessions on the soak's database, sampled every second while the soak
 * runs: a fault that leaves sessions behind (a pool that opens new connections beside ones it never
 * closes) shows as a peak above what the processes may hold, before it shows as "too many clients".
 */
export interface SessionWatch {
  peak(): number
  stop(): void
}

export function watchSessions(stack: Stack): SessionWatch {
  let peak = 0
  const timer = setInterval(() => {
    stack.database.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name like 'hookledger%'`.then(
      ([row]) => {
        peak = Math.max(peak, row?.n ?? 0)
      },
      () => {},
    )
  }, 1000)
  return { peak: () => peak, stop: () => clearInterval(timer) }
}

/** What 1 api and 2 worker processes may hold: each one's pool and its generic-plan connections. */
function sessionBudget(stack: Stack): number {
  const of = (role: 'api' | 'worker') =>
    processConnections({
      role,
      configured: undefined,
      workerConcurrency: stack.workerConcurrency,
      besidePool: connectionsBesidePool(stack.env.DATABASE_URL ?? '', true),
    })
  return of('api') + 2 * of('worker')
}

export async function waitForDrain(
  stack: Stack,
  stats: LoadStats,
  destination: SoakDestination,
  timeoutMs: number,
): Promise<Drain> {
  const started = Date.now()
  const samples: DrainSample[] = []
  while (Date.now() - started < timeoutMs) {
    const unforwarded = [...stats.answered200].filter((id) => !destination.taken.has(id)).length
    const [open] = await stack.database.sql<{ unattempted: number; retrying: number; processing: number }[]>`
      select count(*) filter (where status = 'pending' and attempts = 0)::int as unattempted,
             count(*) filter (where status = 'pending' and attempts > 0)::int as retrying,
             count(*) filter (where status = 'processing')::int as processing
      from inbound_events where status in ('pending', 'processing')`
    const sample = {
      atMs: Date.now() - started,
      unforwarded,
      pendingUnattempted: open?.unattempted ?? 0,
      pendingRetrying: open?.retrying ?? 0,
      processing: open?.processing ?? 0,
    }
    const stillOpen = sample.pendingUnattempted + sample.pendingRetrying + sample.processing
    if (sample.unforwarded === 0 && stillOpen === 0) {
      return { ms: sample.atMs, samples }
    }
    const last = samples.at(-1)
    if (last === undefined || sample.atMs - last.atMs >= DRAIN_SAMPLE_MS) samples.push(sample)
    await new Promise((resolve) => setTimeout(resolve, 500))
  }
  return { ms: undefined, samples }
}

export async function runChecks(
  stack: Stack,
  stats: LoadStats,
  destination: SoakDestination,
  agentKeys: readonly string[],
  sessions: SessionWatch,
): Promise<Verdict[]> {
  const verdicts: Verdict[] = []
  const budget = sessionBudget(stack)
  verdicts.push({
    name: "the service's PostgreSQL sessions stayed within its processes' pools",
    ok: sessions.peak() <= budget,
    detail: `peak ${sessions.peak()} of ${budget} (1 api + 2 workers), sampled every second`,
  })
  const lost = [...stats.answered200].filter((id) => !destination.taken.has(id))
  verdicts.push({
    name: 'every delivery answered 200 was forwarded',
    ok: lost.length === 0,
    detail: `${stats.answered200.size} answered 200, ${lost.length} never forwarded${lost.length > 0 ? ` (e.g. ${lost.slice(0, 3).join(', ')})` : ''}`,
  })
  const unknown = [...destination.taken.keys()].filter((id) => !stats.answered200.has(id))
  verdicts.push({
    name: 'nothing forwarded that was never answered 200',
    ok: unknown.length === 0,
    detail: `${destination.taken.size} forwarded ids, ${unknown.length} never answered 200${unknown.length > 0 ? ` (e.g. ${unknown.slice(0, 3).join(', ')})` : ''}`,
  })
  // A repeat is allowed (at least once) only as the documented re-send: the same event id (the
  // webhook-id is the provider's id, forwarded as is) with the same Idempotency-Key, so the
  // destination can drop it.
  const badKeys = [...destination.keys].filter(
    ([id, keys]) => keys.size !== 1 || !keys.has(`${SOURCE}:${id}:${ROUTE}`),
  )
  verdicts.push({
    name: 'every (re-)send carries the event id and its Idempotency-Key',
    ok: badKeys.length === 0,
    detail: `${badKeys.length} ids sent with another key${badKeys.length > 0 ? ` (e.g. ${badKeys[0]?.[0]}: ${[...(badKeys[0]?.[1] ?? [])].join(' ')})` : ''}`,
  })
  // Settled for good: `completed` (the effect happened) and what only a person or an undo reaches.
  // `exhausted` and `failed` of an idempotent forward may be claimed again (the worker's next
  // attempt, a replay), as docs/outbound.md says; those re-openings are counted, not failures.
  const trails = await stack.database.sql<{ key: string; trail: string[] }[]>`
    select operation_key as key, array_agg(to_status order by id) as trail from operation_audit
    where to_status is not null group by operation_id, operation_key
    having count(*) filter (where to_status in ${stack.database.sql(SETTLED)}) > 1`
  const twice = trails.filter(({ trail }) => {
    const completions = trail.filter((status) => status === 'completed').length
    const final = trail.findIndex((status) => status === 'compensated' || status === 'abandoned')
    return completions > 1 || (final >= 0 && final < trail.length - 1)
  })
  const [audited] = await stack.database.sql<{ ops: number; settled: number }[]>`
    select count(distinct operation_id)::int as ops,
           count(*) filter (where to_status in ${stack.database.sql(SETTLED)})::int as settled
    from operation_audit`
  verdicts.push({
    name: 'no operation settled twice (operation_audit)',
    ok: twice.length === 0,
    detail:
      `${audited?.ops ?? 0} operations, ${audited?.settled ?? 0} settling transitions, ` +
      `${trails.length - twice.length} re-opened after exhausted/failed then settled once, ` +
      `${twice.length} settled twice${twice.length > 0 ? ` (e.g. ${twice[0]?.key}: ${twice[0]?.trail.join(' → ')})` : ''}` +
      (trails.length > twice.length ? ` [e.g. ${trails[0]?.trail.join(' → ')}]` : ''),
  })
  const agents = await stack.database.sql<{ status: string; n: number }[]>`
    select status::text, count(*)::int as n from operations where operation_key like 'agents/%' group by status`
  // Unknown outcome of an irreversible tool: never re-run by itself; it waits for evidence
  // (needs_reconciliation) or, with no reconciler for the tool, for a person (awaiting_approval).
  const escalated = agents
    .filter((row) => row.status === 'needs_reconciliation' || row.status === 'awaiting_approval')
    .reduce((sum, row) => sum + row.n, 0)
  verdicts.push({
    name: 'agents’ unknown outcomes of an irreversible tool escalate',
    ok: escalated === agentKeys.length,
    detail: `${agentKeys.length} reported unknown; ${agents.map((row) => `${row.n} ${row.status}`).join(', ') || 'none in the ledger'}`,
  })
  verdicts.push(await doctorVerdict(stack))
  return verdicts
}

async function doctorVerdict(stack: Stack): Promise<Verdict> {
  const ignores = DOCTOR_IGNORES.flatMap((code) => ['--ignore', code])
  // The agents' escalations are young (the run is shorter than the bound): doctor's default 1 h
  // bound, stated here so the report says what was allowed.
  const result = await cli(stack, [
    'doctor',
    '--json',
    '--processes',
    'api=1,worker=2',
    '--reconciliation-bound',
    '1h',
    ...ignores,
  ])
  try {
    const report = JSON.parse(result.stdout) as DoctorReport
    const codes = report.findings.map((finding) => `${finding.code} (${finding.count}): ${finding.message}`)
    return {
      name: 'hookledger doctor --json clean',
      ok: report.ok && result.code === 0,
      detail: `${report.counts.checks} checks, ${report.findings.length} findings, ${report.ignored.length} ignored (${DOCTOR_IGNORES.join(', ')})${codes.length > 0 ? `: ${codes.join('; ')}` : ''}`,
    }
  } catch {
    return {
      name: 'hookledger doctor --json clean',
      ok: false,
      detail: `exit ${result.code}: ${result.stderr.slice(0, 300)}`,
    }
  }
}
