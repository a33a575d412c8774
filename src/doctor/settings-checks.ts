import type { Config } from '../config/config.js'
import { ConfigError } from '../config/errors.js'
import { processConnections } from '../db/client.js'
import { databaseClockMs, serverSettings, tablesWithAutovacuumOff } from '../db/doctor-queries.js'
import { type Check, type CheckOutcome, EXAMPLES, type Finding, found, noFindings } from './types.js'

const TRUE_WORDS = /^(t|tr|tru|true|on|y|ye|yes|1)$/i

/**
 * PostgreSQL settings the ledger's promises rest on, as a session of this database sees them
 * (`ALTER DATABASE … SET` and role settings included): a read-only session (a standby, or
 * default_transaction_read_only) takes no delivery at all; a commit that is not flushed before the 200
 * (synchronous_commit off) can be lost in a crash; without autovacuum, plans go stale as tables grow
 * (README "Autovacuum"), globally or per table (`autovacuum_enabled = false`); with JIT on, the
 * partitioned ledger's worker statements are compiled at every run (migration 0018).
 */
export const postgresSettings: Check = {
  name: 'postgres_settings',
  async run({ sql }) {
    const findings: Finding[] = []
    const settings = await serverSettings(sql, SETTINGS)
    if (TRUE_WORDS.test(settings.get('transaction_read_only') ?? 'off')) {
      findings.push({
        code: 'postgres.read_only',
        severity: 'error',
        message:
          "the ledger's sessions are read-only (a standby, or default_transaction_read_only): every delivery answers 503 ledger_read_only and nothing is written",
        fix: 'point DATABASE_URL at the primary, or turn it off where it was turned on: `alter database <name> reset default_transaction_read_only` (or `alter role … reset`, or postgresql.conf)',
        count: 1,
        examples: [`transaction_read_only=${settings.get('transaction_read_only')}`],
      })
    }
    if (settings.get('synchronous_commit') === 'off') {
      findings.push({
        code: 'postgres.synchronous_commit_off',
        severity: 'error',
        message:
          'synchronous_commit is off for this database: a 200 can answer a commit that a PostgreSQL crash then loses, and the provider does not retry it',
        fix: 'turn it on where it was turned off: `alter database <name> reset synchronous_commit` (or `alter role … reset`, or postgresql.conf)',
        count: 1,
        examples: ['synchronous_commit=off'],
      })
    }
    const autovacuum = settings.get('autovacuum') ?? 'on'
    const counts = settings.get('track_counts') ?? 'on'
    if (!TRUE_WORDS.test(autovacuum) || !TRUE_WORDS.test(counts)) {
      findings.push({
        code: 'postgres.autovacuum_off',
        severity: 'warning',
        message: `autovacuum does not run (autovacuum=${autovacuum}, track_counts=${counts}): the ledger's plans are never refreshed as its tables grow`,
        fix: 'set autovacuum = on and track_counts = on in postgresql.conf and reload',
        count: 1,
        examples: [`autovacuum=${autovacuum}`, `track_counts=${counts}`],
      })
    }
    const jit = settings.get('jit') ?? 'off'
    if (TRUE_WORDS.test(jit)) {
      findings.push({
        code: 'postgres.jit_on',
        severity: 'warning',
        message:
          "JIT is on for this database: with the partitioned ledger's estimates it compiles worker statements that run in milliseconds, some 300 ms of CPU each (migration 0018 turns it off where the migrating role owns the database)",
        fix: 'as the database owner: `alter database <name> set jit = off` (or `alter role <hookledger role> set jit = off`)',
        count: 1,
        examples: [`jit=${jit}`],
      })
    }
    const tables = await tablesWithAutovacuumOff(sql, TRUE_WORDS.source)
    if (tables.length > 0) {
      findings.push({
        code: 'postgres.table_autovacuum_off',
        severity: 'warning',
        message: `autovacuum is turned off on ${tables.length} ledger table(s)`,
        fix: `turn it back on: ${tables.map((name) => `\`alter table ${name} reset (autovacuum_enabled)\``).join(', ')}`,
        count: tables.length,
        examples: tables.slice(0, EXAMPLES),
      })
    }
    return { findings, notes: [] }
  },
}

/** The settings the checks of this file read. */
const SETTINGS = [
  'transaction_read_only',
  'synchronous_commit',
  'jit',
  'autovacuum',
  'track_counts',
  'max_connections',
  'superuser_reserved_connections',
  'reserved_connections',
]

/** Connections `hookledger approvals` and the like hold beside the service (README "Connection budget"). */
const ADMIN_TOOL_CONNECTIONS = 2

/**
 * The pools of the processes the operator says run (`--processes`, default one `--role all`), each
 * plus its generic-plan connections and its migration connection at start, plus the admin tools,
 * against max_connections less its reserved slots. Sizes come from processConnections, as each
 * process computes its own pool.
 */
export const connectionBudget: Check = {
  name: 'connection_budget',
  async run({ sql, config, processes, connectionsBesidePool }) {
    const settings = await serverSettings(sql, SETTINGS)
    const max = Number(settings.get('max_connections') ?? 100)
    const reserved =
      Number(settings.get('superuser_reserved_connections') ?? 0) +
      Number(settings.get('reserved_connections') ?? 0)
    const usable = max - reserved
    const connectionsOf = (role: 'all' | 'api' | 'worker') =>
      processConnections({
        role,
        configured: config.file.database.poolSize,
        workerConcurrency: config.file.worker.concurrency,
        besidePool: connectionsBesidePool,
      })
    let connections: { all: number; api: number; worker: number }
    try {
      connections = { all: connectionsOf('all'), api: connectionsOf('api'), worker: connectionsOf('worker') }
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      return found({
        code: 'config.pool_too_small',
        severity: 'error',
        message: error.message.replace(/^invalid config:\s*-\s*/, ''),
        fix: 'raise database.poolSize (or remove it to size the pool by role)',
        count: 1,
        examples: [`database.poolSize=${config.file.database.poolSize}`],
      })
    }
    const parts = (['all', 'api', 'worker'] as const)
      .filter((role) => processes[role] > 0)
      // Each process also opens one connection, briefly, to apply migrations at start.
      .map((role) => ({ role, count: processes[role], each: connections[role] + 1 }))
    const needed = parts.reduce((sum, part) => sum + part.count * part.each, ADMIN_TOOL_CONNECTIONS)
    if (needed <= usable) return noFindings()
    const sum = parts.map((part) => `${part.count} × ${part.each} (${part.role})`).join(' + ')
    return found({
      code: 'postgres.max_connections',
      severity: 'error',
      message: `the pools need up to ${needed} connections (${sum} + ${ADMIN_TOOL_CONNECTIONS} admin), more than max_connections ${max} less ${reserved} reserved = ${usable}`,
      fix: 'raise max_connections (restart) or lower database.poolSize / worker.concurrency; pass --processes as deployed (e.g. api=2,worker=3) for an exact budget',
      count: 1,
      examples: [`max_connections=${max}`, `needed=${needed}`],
    })
  },
}

/** The tightest signed-timestamp tolerance among the configured sources, in seconds, if any has one. */
export function smallestTolerance(config: Config): { seconds: number; source: string } | undefined {
  let smallest: { seconds: number; source: string } | undefined
  for (const [id, source] of config.sources) {
    const verify = source.config.verify
    const seconds =
      'toleranceSeconds' in verify
        ? verify.toleranceSeconds
        : verify.scheme === 'hmac'
          ? verify.timestamp?.toleranceSeconds
          : undefined
    if (seconds !== undefined && (smallest === undefined || seconds < smallest.seconds)) {
      smallest = { seconds, source: id }
    }
  }
  return smallest
}

/** The share of a tolerance the clocks may disagree by before it is a finding. */
const SKEW_SHARE = 0.1
/** Without a timestamped source: leases, retention and the evidence margin still read clocks. */
const DEFAULT_SKEW_BOUND_MS = 30_000

/**
 * This host's clock against PostgreSQL's. Signatures are checked against the receiving host's clock,
 * leases and retention against PostgreSQL's: a host off by a tenth of the tightest tolerance eats
 * into it (an error once it exceeds the tolerance: every timestamped delivery could be refused).
 */
export const clockSkew: Check = {
  name: 'clock_skew',
  async run({ sql, config, clock }): Promise<CheckOutcome> {
    const tolerance = smallestTolerance(config)
    const boundMs = tolerance === undefined ? DEFAULT_SKEW_BOUND_MS : tolerance.seconds * 1000 * SKEW_SHARE
    const before = clock()
    const database = await databaseClockMs(sql)
    const after = clock()
    const roundTripMs = after - before
    if (roundTripMs > boundMs) {
      return {
        findings: [],
        notes: [{ check: 'clock_skew', message: `not measured: the round trip took ${roundTripMs} ms` }],
      }
    }
    const skewMs = Math.round((before + after) / 2 - database)
    if (Math.abs(skewMs) <= boundMs) return noFindings()
    const against =
      tolerance === undefined
        ? `the ${DEFAULT_SKEW_BOUND_MS / 1000} s bound`
        : `${SKEW_SHARE * 100}% of the smallest signature tolerance (${tolerance.seconds} s, source '${tolerance.source}')`
    return found({
      code: 'clock.skew',
      severity: tolerance !== undefined && Math.abs(skewMs) > tolerance.seconds * 1000 ? 'error' : 'warning',
      message: `this host's clock is ${(skewMs / 1000).toFixed(1)} s ${skewMs > 0 ? 'ahead of' : 'behind'} PostgreSQL's, beyond ${against}`,
      fix: 'synchronise both machines with NTP (chrony, systemd-timesyncd)',
      count: 1,
      examples: [`skew=${skewMs} ms`],
    })
  },
}
