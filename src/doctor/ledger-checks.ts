import type { Config } from '../config/config.js'
import {
  expiredLeases,
  foreignKeyState,
  longReconciliations,
  missingForwardsOfDoneEvents,
  openForwardsOfDoneEvents,
  orphanRows,
  partitionsReach,
  periodForeignKeyState,
} from '../db/doctor-queries.js'
import {
  type Check,
  counted,
  type DoctorContext,
  EXAMPLES,
  type Finding,
  found,
  noFindings,
} from './types.js'

/**
 * A DONE event whose forward route (`<source>:<event id>:route:<route id>`), or forward in code
 * (`<source>:<event id>:forward`), is not `completed`. DONE comes after the forward's success, so
 * this is a ledger edited by hand, a restore, or a bug. Two bounded reads: open forward operations
 * whose event is DONE, and the newest DONE events whose route's operation is missing. A source's own
 * forward (`handler: forward`) has no operation: its event's row is its record.
 */
export const doneEventsUnsettled: Check = {
  name: 'done_unsettled',
  async run({ sql, config, scanLimit }) {
    const sendsOutsideLedger = sourcesForwardingOutsideLedger(config)
    const forwardRoutes = [...config.sources.values()].flatMap((source) =>
      (source.config.routes ?? [])
        .filter((route) => route.forward !== undefined)
        .map((route) => `${source.config.id}/${route.id}`),
    )
    const open = await openForwardsOfDoneEvents(sql, scanLimit, sendsOutsideLedger)
    // Operations are deleted `retention.operationDays` after they settled: older events may have none.
    const missing = await missingForwardsOfDoneEvents(sql, {
      forwardRoutes,
      days: config.file.retention.operationDays,
      limit: scanLimit,
    })
    const byKey = new Map<string, string>()
    for (const row of [...open, ...missing]) byKey.set(row.key, row.status ?? 'no operation')
    if (byKey.size === 0) return noFindings()
    const bounded = open.length >= scanLimit || missing.length >= scanLimit
    return found({
      code: 'events.done_unsettled',
      severity: 'error',
      message: `${counted(byKey.size, bounded)} DONE event(s) have a forward or route operation that is not completed`,
      fix: 'look at each operation (`/admin/operations`) and its destination: if the delivery did not happen, replay the event once its operation is settled; a DONE event is not delivered again by itself',
      count: byKey.size,
      countIsLowerBound: bounded,
      examples: [...byKey].slice(0, EXAMPLES).map(([key, status]) => `${key} (${status})`),
    })
  },
}

/**
 * The sources whose own forward (`handler: forward`) is sent outside the outbound ledger: a
 * `<source>:<event id>:forward` operation of theirs is one an earlier version left, which nothing
 * settles or invokes again (the event's row decides), so no check reports it.
 */
function sourcesForwardingOutsideLedger(config: Config): string[] {
  return [...config.sources.values()]
    .filter((source) => source.config.handler?.type === 'forward')
    .map((source) => source.config.id)
}

/**
 * `in_progress` operations whose lease ran out more than `leaseMarginMs` ago: nobody holds them, and
 * nothing takes them over until their caller invokes the same key again.
 */
export const staleLeases: Check = {
  name: 'stale_leases',
  async run({ sql, config, leaseMarginMs, scanLimit }) {
    const { count: n, examples } = await expiredLeases(sql, {
      sendsOutsideLedger: sourcesForwardingOutsideLedger(config),
      marginMs: leaseMarginMs,
      limit: scanLimit,
      examples: EXAMPLES,
    })
    if (n === 0) return noFindings()
    return found({
      code: 'operations.stale_lease',
      severity: 'error',
      message: `${counted(n, n >= scanLimit)} operation(s) are in_progress with a lease that ran out over ${Math.round(leaseMarginMs / 1000)} s ago and no live attempt`,
      fix: 'invoke the same key again: a retry of its event (replay) or of the workflow takes the lease over, and an attempt left in flight then becomes needs_reconciliation',
      count: n,
      countIsLowerBound: n >= scanLimit,
      examples: examples.map((row) => `${row.key} (newest attempt: ${row.attempt ?? 'none'})`),
    })
  },
}

/**
 * The foreign keys that make an attempt without its operation (or event) impossible. The event's is
 * one per ledger period, between that period's two partitions (migration 0018).
 */
const ATTEMPT_KEYS = [
  { table: 'operation_attempts', column: 'operation_id', parent: 'operations', perPeriod: false },
  { table: 'event_attempts', column: 'event_row_id', parent: 'inbound_events', perPeriod: true },
] as const

/**
 * Attempts whose operation or event row is gone. The foreign keys (ON DELETE CASCADE) rule this out
 * unless they were dropped, their triggers disabled, or rows loaded with `session_replication_role =
 * replica` (a restore with --disable-triggers): so the keys are checked, and the newest attempts read.
 */
export const orphanAttempts: Check = {
  name: 'orphan_attempts',
  async run({ sql, scanLimit }) {
    const findings: Finding[] = []
    for (const key of ATTEMPT_KEYS) {
      const { table, column, parent } = key
      const guard = await (key.perPeriod ? periodForeignKeyState(sql, key) : foreignKeyState(sql, key))
      if (!guard.enforced) {
        findings.push({
          code: 'schema.foreign_key_off',
          severity: 'error',
          message: `${table}.${column} → ${parent}: the foreign key is ${guard.present ? 'not enforced (disabled trigger or not validated)' : 'missing'}`,
          fix: `restore it: \`alter table ${table} enable trigger all\`, or drop the orphans and run \`hookledger migrate\` on a fresh database to compare the schema`,
          count: 1,
          examples: [table],
        })
      }
      const orphans = await orphanRows(sql, key, scanLimit)
      if (orphans.length === 0) continue
      findings.push({
        code: `${table === 'operation_attempts' ? 'operations' : 'events'}.orphan_attempts`,
        severity: 'error',
        message: `${orphans.length} ${table} row(s) name a ${parent} row that does not exist (of the newest ${scanLimit})`,
        fix: `delete them (\`delete from ${table} a where not exists (select 1 from ${parent} p where p.id = a.${column})\`) and find how they lost their parent: a restore with triggers disabled, or a manual delete`,
        count: orphans.length,
        countIsLowerBound: orphans.length >= scanLimit,
        examples: orphans.slice(0, EXAMPLES).map((row) => `attempt ${row.id} → ${parent} ${row.parent}`),
      })
    }
    return { findings, notes: [] }
  },
}

/**
 * Operations in `needs_reconciliation` for longer than the bound, counted from the audit entry that
 * put them there (the reconciler's lease moves updated_at on every try).
 */
export const staleReconciliation: Check = {
  name: 'stale_reconciliation',
  async run(context: DoctorContext) {
    const { sql, reconciliationBoundMs, scanLimit } = context
    const rows = await longReconciliations(sql, { olderThanMs: reconciliationBoundMs, limit: scanLimit })
    if (rows.length === 0) return noFindings()
    return found({
      code: 'operations.stale_reconciliation',
      severity: 'warning',
      message: `${counted(rows.length, rows.length >= scanLimit)} operation(s) have been needs_reconciliation for over ${describeMs(reconciliationBoundMs)}`,
      fix: 'make sure a worker runs (it reconciles due rows) and read each last_error; a tool without a reconcile hook needs a person: `hookledger approvals list`',
      count: rows.length,
      countIsLowerBound: rows.length >= scanLimit,
      examples: rows
        .slice(0, EXAMPLES)
        .map((row) => `${row.key} (${row.tool}, since ${row.since.toISOString()})`),
    })
  },
}

export function describeMs(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`
  if (ms % 60_000 === 0) return `${ms / 60_000} min`
  return `${ms / 1000} s`
}

/**
 * The partitions a claim needs: a ledger period and a key generation for its own time, made
 * PARTITIONS_AHEAD_DAYS ahead by every worker's retention loop and by every start. Less than a day
 * left means no worker has kept them for a day; none left means claims fail now.
 */
export const partitionsAhead: Check = {
  name: 'partitions_ahead',
  async run({ sql }) {
    const reach = await partitionsReach(sql)
    const short = [
      { what: 'ledger periods (ledger_periods)', hours: reach.periodHours },
      { what: 'dedup key generations (inbound_key_generations)', hours: reach.generationHours },
    ].filter((part) => part.hours === null || part.hours < 24)
    if (short.length === 0) return noFindings()
    const now = short.some((part) => part.hours === null || part.hours <= 0)
    return found({
      code: 'ledger.partitions_short',
      severity: 'error',
      message: now
        ? 'no partition covers now: every claim fails until a worker or a start makes them'
        : 'the ledger partitions end within a day: no worker has made new ones for a day',
      fix: 'start a worker (`hookledger serve --role worker`): its retention loop makes them two days ahead, and so does every start of the service',
      count: short.length,
      examples: short.map((part) =>
        part.hours === null ? `${part.what}: none` : `${part.what}: end in ${part.hours.toFixed(1)} h`,
      ),
    })
  },
}
