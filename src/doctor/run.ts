import { pingLedger } from '../db/client.js'
import { MIGRATIONS_FOLDER } from '../db/migrate.js'
import { briefConnection } from '../queue/connections.js'
import {
  doneEventsUnsettled,
  orphanAttempts,
  partitionsAhead,
  staleLeases,
  staleReconciliation,
} from './ledger-checks.js'
import { pendingWithoutJob, redisEviction } from './queue-checks.js'
import { dedupKeys, pendingMigrations } from './schema-checks.js'
import { clockSkew, connectionBudget, postgresSettings } from './settings-checks.js'
import type { Check, CheckOutcome, DoctorContext, Finding, Note } from './types.js'

export interface DoctorReport {
  ok: boolean
  findings: Finding[]
  /** Findings whose code the operator named with --ignore: listed, but they leave the exit status 0. */
  ignored: Finding[]
  notes: Note[]
  counts: {
    checks: number
    findings: number
    errors: number
    warnings: number
    ignored: number
    skipped: number
  }
}

/**
 * Every check over the ledger, in order. Migrations first: on a ledger that is behind, the others
 * may fail on a missing column, and the pending migration is the finding that explains them.
 */
function ledgerChecks(migrationsFolder: string): Check[] {
  return [
    pendingMigrations(migrationsFolder),
    postgresSettings,
    connectionBudget,
    clockSkew,
    dedupKeys,
    partitionsAhead,
    doneEventsUnsettled,
    staleLeases,
    staleReconciliation,
    orphanAttempts,
  ]
}

const REDIS_CHECKS = ['redis_eviction', 'pending_without_job'] as const

/**
 * Runs every check and gathers what they found. A check that throws becomes a finding of its own
 * (`doctor.check_failed`), so one broken check never hides the others; an unreachable PostgreSQL or
 * Redis is one finding, not one per check.
 */
export async function runDoctor(
  context: DoctorContext,
  options: { migrationsFolder?: string; ignore?: ReadonlySet<string> } = {},
): Promise<DoctorReport> {
  const all: Finding[] = []
  const notes: Note[] = []
  let checks = 0
  const take = (outcome: CheckOutcome) => {
    all.push(...outcome.findings)
    notes.push(...outcome.notes)
  }
  const guarded = async (name: string, run: () => Promise<CheckOutcome>) => {
    checks += 1
    try {
      take(await run())
    } catch (error) {
      all.push(failed(name, error))
    }
  }

  const ledger = ledgerChecks(options.migrationsFolder ?? MIGRATIONS_FOLDER)
  const reachable = await pingLedger(context.sql).then(
    () => undefined,
    (error: unknown) => error,
  )
  if (reachable === undefined) {
    for (const check of ledger) await guarded(check.name, () => check.run(context))
  } else {
    checks += 1
    all.push({
      code: 'postgres.unreachable',
      severity: 'error',
      message: `PostgreSQL did not answer: ${messageOf(reachable)}`,
      fix: 'check DATABASE_URL and that the server runs; the ledger checks were skipped',
      count: 1,
      examples: [],
    })
  }

  if (context.redisUrl === undefined) {
    for (const check of REDIS_CHECKS) {
      notes.push({ check, message: 'skipped: REDIS_URL is unset, jobs run in the in-process queue' })
    }
  } else {
    const redis = briefConnection(context.redisUrl)
    redis.on('error', () => {}) // the failed command reports it
    try {
      const pinged = await redis.ping().then(
        () => undefined,
        (error: unknown) => error,
      )
      if (pinged !== undefined) {
        checks += 1
        all.push({
          code: 'redis.unreachable',
          severity: 'error',
          message: `Redis did not answer: ${messageOf(pinged)}`,
          fix: 'check REDIS_URL and that the server runs; the queue checks were skipped',
          count: 1,
          examples: [],
        })
      } else {
        await guarded('redis_eviction', () => redisEviction(redis))
        if (reachable === undefined)
          await guarded('pending_without_job', () => pendingWithoutJob(context, redis))
      }
    } finally {
      redis.disconnect()
    }
  }

  const ignore = options.ignore ?? new Set<string>()
  const findings = all.filter((finding) => !ignore.has(finding.code))
  const ignored = all.filter((finding) => ignore.has(finding.code))
  const errors = findings.filter((finding) => finding.severity === 'error').length
  return {
    ok: findings.length === 0,
    findings,
    ignored,
    notes,
    counts: {
      checks,
      findings: findings.length,
      errors,
      warnings: findings.length - errors,
      ignored: ignored.length,
      skipped: notes.length,
    },
  }
}

function failed(check: string, error: unknown): Finding {
  return {
    code: 'doctor.check_failed',
    severity: 'error',
    message: `the ${check} check could not run: ${messageOf(error)}`,
    fix: 'run `hookledger migrate` if the schema is behind; otherwise report it with this message',
    count: 1,
    examples: [check],
  }
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0]

/** The report as text: one line per finding (with its examples and fix), or one "ok" line. */
export function formatReport(report: DoctorReport): string[] {
  const skipped = report.notes.map((note) => `${note.check}: ${note.message}`)
  if (report.ignored.length > 0)
    skipped.push(`ignored: ${report.ignored.map((finding) => finding.code).join(', ')}`)
  if (report.ok) {
    const suffix = skipped.length === 0 ? '' : ` (${skipped.join('; ')})`
    return [`ok: ${report.counts.checks} checks, no findings${suffix}`]
  }
  const lines = report.findings.map((finding) => {
    const examples = finding.examples.length === 0 ? '' : ` [e.g. ${finding.examples.join(', ')}]`
    return `${finding.severity} ${finding.code}: ${finding.message}${examples}; fix: ${finding.fix}`
  })
  for (const line of skipped) lines.push(`note ${line}`)
  return lines
}
