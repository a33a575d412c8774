import { BackfillError } from '../backfill/errors.js'
import { runBackfillPass } from '../backfill/pass.js'
import type { BackfillReport } from '../backfill/sweep.js'
import type { Environment } from '../config/env.js'
import { openLedger } from '../db/client.js'
import { migrateLedger } from '../db/migrate.js'
import type { Logger } from '../logger.js'
import { loadConfig } from '../service/config.js'
import { CliError, parseCommandLine, reportingCliErrors, usageError } from './errors.js'
import type { CommandIo } from './sign.js'

export const BACKFILL_USAGE = `  hookledger backfill --source ID [--since TIME] [--json]
                                   run one backfill pass by hand and print what it did; TIME is an ISO
                                   date/time or a span back from now (90m, 36h, 3d); without it the
                                   pass continues the source's cursor, as the service's loop does`

/**
 * `hookledger backfill`: one pass for one source, on the ledger directly. Claimed rows are left to
 * the running service's relay, which enqueues committed rows that have no job (relay.graceMs). The
 * exit status is 1 when the pass stopped on an error (what it did before is still printed, and the
 * error is one line on stderr).
 */
export function runBackfillCommand(
  args: string[],
  env: Environment,
  databaseUrl: () => Promise<string>,
  io: CommandIo & { logger: Logger },
): Promise<number> {
  return reportingCliErrors('hookledger backfill', io, async () => {
    const { values } = parseCommandLine({
      args,
      options: {
        source: { type: 'string' },
        since: { type: 'string' },
        json: { type: 'boolean', default: false },
      },
      strict: true,
    })
    if (values.source === undefined) throw usageError('backfill needs --source ID')
    const since = values.since === undefined ? undefined : parseSince(values.since, Date.now())
    const config = await loadConfig(env.HOOKLEDGER_CONFIG, env.lookup, { onlySource: values.source })
    const source = config.sources.get(values.source)
    if (source === undefined) throw new CliError(`no source named '${values.source}' is configured`)
    if (source.backfill === undefined) {
      throw new CliError(`source '${values.source}' has no backfill block (see docs/backfill.md)`)
    }
    const url = await databaseUrl()
    await migrateLedger(url, io.logger)
    const ledger = openLedger(url, { max: 2 })
    try {
      const report = await runBackfillPass(
        { sql: ledger.sql, logger: io.logger },
        source,
        since === undefined ? {} : { since },
      ).catch((error: unknown) => {
        // pass_running: the pass never started, so there is no report, only the reason.
        if (error instanceof BackfillError) throw new CliError(`${error.code}: ${error.message}`)
        throw error
      })
      io.stdout(values.json ? `${JSON.stringify(report)}\n` : describeReport(report))
      if (report.error === undefined) return 0
      // The report says what the pass did before it stopped; stderr says why, as one line.
      io.stderr(`hookledger backfill: ${report.error.code}: ${report.error.message}\n`)
      return 1
    } finally {
      await ledger.close()
    }
  })
}

/** `2026-11-30T12:00:00Z`, `2026-11-30`, or a span back from now: `90m`, `36h`, `3d`. */
export function parseSince(text: string, now: number): Date {
  const span = /^(\d{1,6})([mhd])$/.exec(text)
  if (span !== null) {
    const unit = { m: 60_000, h: 3_600_000, d: 86_400_000 }[span[2] as 'm' | 'h' | 'd']
    return new Date(now - Number(span[1]) * unit)
  }
  const date = /^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text)
    ? Date.parse(text)
    : Number.NaN
  if (Number.isNaN(date)) {
    throw usageError(
      `--since must be an ISO date/time (2026-11-30T12:00:00Z) or a span like 90m, 36h, 3d; got '${text}'`,
    )
  }
  if (date > now) throw usageError(`--since ${text} is in the future`)
  return new Date(date)
}

/** The report as lines a person reads: what was listed, what was done, where the next pass starts. */
export function describeReport(report: BackfillReport): string {
  const lines: string[] = []
  const from = report.resumedAfter === null ? '' : `, resuming after ${report.resumedAfter}`
  const noun = report.provider === 'stripe' ? 'events' : 'deliveries'
  lines.push(
    `source '${report.source}' (${report.provider}): listed ${report.listed} ${noun} since ${report.since.toISOString()}${from}, in ${report.pages} page(s)`,
  )
  if (report.provider === 'stripe') {
    lines.push(`  claimed ${report.claimed.length} missing event(s)${list(report.claimed)}`)
    lines.push(`  ${report.duplicates} already in the ledger`)
    if (report.conflicts.length > 0) {
      lines.push(
        `  ${report.conflicts.length} already held with another body (see inbound_conflicts)${list(report.conflicts)}`,
      )
    }
  } else {
    lines.push(
      `  asked GitHub to redeliver ${report.redelivered.length} failed delivery(ies)${list(report.redelivered)}`,
    )
    lines.push(`  ${report.alreadyRequested} failed delivery(ies) already asked for by an earlier pass`)
    lines.push(`  ${report.alreadyInLedger} failed delivery(ies) whose event is in the ledger anyway`)
  }
  if (report.error !== undefined) {
    lines.push(`  stopped: ${report.error.code}: ${report.error.message}`)
  } else if (!report.complete) {
    lines.push('  stopped at backfill.maxPagesPerPass; the next pass continues from here')
  } else {
    lines.push('  complete')
  }
  return `${lines.join('\n')}\n`
}

function list(ids: readonly string[]): string {
  if (ids.length === 0) return ''
  const shown = ids.slice(0, 20).join(', ')
  return `: ${shown}${ids.length > 20 ? `, … (${ids.length - 20} more)` : ''}`
}
