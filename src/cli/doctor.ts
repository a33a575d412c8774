import postgres from 'postgres'
import type { Environment } from '../config/env.js'
import { connectionsBesidePool, ledgerTarget } from '../db/client.js'
import { ledgerPeriodsHeld } from '../db/ledger-periods.js'
import { formatReport, runDoctor } from '../doctor/run.js'
import type { ProcessCounts } from '../doctor/types.js'
import { usesGenericPlans } from '../retention/partitions.js'
import { loadConfig } from '../service/config.js'
import { parseCommandLine, reportingCliErrors, usageError } from './errors.js'
import type { CommandIo } from './sign.js'

export const DOCTOR_USAGE = `  hookledger doctor [--json] [--reconciliation-bound 1h] [--lease-margin 5m]
             [--processes all=1] [--scan-limit 10000] [--ignore CODE,…]
                                   audit the ledger, PostgreSQL, Redis and this host's clock: one line per
                                   finding with its fix (exit 1), or one "ok" line (exit 0)`

/** What a finding costs the exit status: any finding is one, so `hookledger doctor && …` gates on a clean ledger. */
export const EXIT_FINDINGS = 1

const DEFAULT_RECONCILIATION_BOUND_MS = 3_600_000
const DEFAULT_LEASE_MARGIN_MS = 300_000
const DEFAULT_SCAN_LIMIT = 10_000
// Doctor reads; a statement that takes longer than this on a big ledger is a bug of a check, not a wait.
const STATEMENT_TIMEOUT_MS = 15_000

export interface DoctorDependencies {
  environment: () => Environment
  /** DATABASE_URL, or the embedded server a running `hookledger serve` owns. */
  ledgerUrl: (env: Environment) => Promise<string>
  /** Milliseconds now on this host; tests move it. */
  clock?: () => number
  migrationsFolder?: string
}

/**
 * `hookledger doctor`: runs the checks of src/doctor/ against the ledger the environment names and
 * prints what they found. It changes nothing. Exit 0: no findings; 1: findings (or the command could
 * not run: a bad config or environment, printed as one line); 2: a usage mistake.
 */
export function runDoctorCommand(args: string[], deps: DoctorDependencies, io: CommandIo): Promise<number> {
  return reportingCliErrors('hookledger doctor', io, async () => {
    const { values } = parseCommandLine({
      args,
      options: {
        help: { type: 'boolean', short: 'h', default: false },
        json: { type: 'boolean', default: false },
        'reconciliation-bound': { type: 'string' },
        'lease-margin': { type: 'string' },
        processes: { type: 'string' },
        'scan-limit': { type: 'string' },
        ignore: { type: 'string', multiple: true },
      },
      strict: true,
    })
    if (values.help) {
      io.stdout(`usage:\n${DOCTOR_USAGE}\n`)
      return 0
    }
    const reconciliationBoundMs = parseSpan(
      values['reconciliation-bound'],
      '--reconciliation-bound',
      DEFAULT_RECONCILIATION_BOUND_MS,
    )
    const leaseMarginMs = parseSpan(values['lease-margin'], '--lease-margin', DEFAULT_LEASE_MARGIN_MS)
    const processes = parseProcesses(values.processes)
    const scanLimit = parseCount(values['scan-limit'], '--scan-limit', DEFAULT_SCAN_LIMIT)
    const env = deps.environment()
    const config = await loadConfig(env.HOOKLEDGER_CONFIG, env.lookup)
    const url = await deps.ledgerUrl(env)
    // Not openLedger: doctor's statements get a deadline of their own, and its name in pg_stat_activity.
    // Behind PgBouncer the server deadline cannot ride in the startup packet (PgBouncer refuses
    // settings it does not track) and statements cannot be prepared; the client-side deadline holds.
    const target = ledgerTarget(url)
    const sql = postgres(target.url, {
      max: 1,
      connect_timeout: 5,
      query_timeout: STATEMENT_TIMEOUT_MS / 1000,
      onnotice: () => {},
      prepare: !target.pgbouncer,
      connection: {
        application_name: 'hookledger doctor',
        ...(target.pgbouncer ? {} : { statement_timeout: STATEMENT_TIMEOUT_MS }),
      },
    })
    try {
      const report = await runDoctor(
        {
          sql,
          config,
          redisUrl: env.REDIS_URL,
          reconciliationBoundMs,
          leaseMarginMs,
          scanLimit,
          processes,
          // A ledger that does not answer (or is not migrated yet) gets its own finding; the count is moot.
          connectionsBesidePool: connectionsBesidePool(
            url,
            usesGenericPlans(config, await ledgerPeriodsHeld(sql).catch(() => 0)),
          ),
          clock: deps.clock ?? Date.now,
        },
        {
          ignore: new Set(
            (values.ignore ?? []).flatMap((codes) => codes.split(',')).map((code) => code.trim()),
          ),
          ...(deps.migrationsFolder === undefined ? {} : { migrationsFolder: deps.migrationsFolder }),
        },
      )
      if (values.json) io.stdout(`${JSON.stringify(report, null, 2)}\n`)
      else io.stdout(`${formatReport(report).join('\n')}\n`)
      return report.ok ? 0 : EXIT_FINDINGS
    } finally {
      await sql.end({ timeout: 5 })
    }
  })
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** `90s`, `5m`, `1h`, `2d`: a span of time in milliseconds. */
function parseSpan(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback
  const match = /^(\d+)(s|m|h|d)$/.exec(text)
  const unit = match?.[2] === undefined ? undefined : UNITS[match[2]]
  if (match === null || unit === undefined || Number(match[1]) === 0) {
    throw usageError(`${flag} must be a span such as 90s, 5m, 1h or 2d (got '${text}')`)
  }
  return Number(match[1]) * unit
}

function parseCount(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > 1_000_000) {
    throw usageError(`${flag} must be a whole number from 1 to 1000000 (got '${text}')`)
  }
  return Number(text)
}

/** `api=2,worker=3`: how many processes of each role share the database (default one `all`). */
function parseProcesses(text: string | undefined): ProcessCounts {
  if (text === undefined) return { all: 1, api: 0, worker: 0 }
  const counts: ProcessCounts = { all: 0, api: 0, worker: 0 }
  for (const part of text.split(',')) {
    const match = /^(all|api|worker)=(\d{1,4})$/.exec(part.trim())
    const role = match?.[1] as keyof ProcessCounts | undefined
    if (match === null || role === undefined) {
      throw usageError(`--processes must list role=count pairs such as api=2,worker=3 (got '${part}')`)
    }
    counts[role] = Number(match[2])
  }
  return counts
}
