import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { dedupKeyStates } from '../db/dedup-keys.js'
import { lastAppliedMigrationAt } from '../db/migrate.js'
import type { DedupKeyDefinition } from '../inbound/dedup-key.js'
import { configuredDedupKey, dedupKeyDrift, eventsKeyedBy } from '../inbound/dedup-key-drift.js'
import { type Check, EXAMPLES, found, noFindings } from './types.js'

interface JournalEntry {
  tag: string
  when: number
}

/**
 * Migrations in the journal that the ledger has not applied. drizzle's migrator applies every entry
 * whose `when` is later than the newest row of drizzle.__drizzle_migrations, so that is the test; a
 * ledger newer than this build (rows later than the journal's last entry) is reported too.
 */
export function pendingMigrations(folder: string): Check {
  return {
    name: 'migrations',
    async run({ sql }) {
      const journal = JSON.parse(await readFile(join(folder, 'meta', '_journal.json'), 'utf8')) as {
        entries: JournalEntry[]
      }
      const last = await lastAppliedMigrationAt(sql)
      const pending = journal.entries.filter((entry) => entry.when > last)
      const newest = Math.max(...journal.entries.map((entry) => entry.when))
      if (pending.length > 0) {
        return found({
          code: 'migrations.pending',
          severity: 'error',
          message: `${pending.length} migration(s) are not applied to this ledger`,
          fix: 'run `hookledger migrate` (every `serve` also applies them at start)',
          count: pending.length,
          examples: pending.slice(0, EXAMPLES).map((entry) => entry.tag),
        })
      }
      if (last > newest) {
        return found({
          code: 'migrations.ledger_newer',
          severity: 'warning',
          message:
            'the ledger has migrations this build does not know: it was migrated by a newer hookledger',
          fix: 'run the hookledger version that migrated it (downgrades are not supported)',
          count: 1,
          examples: [`applied up to ${new Date(last).toISOString()}`],
        })
      }
      return noFindings()
    },
  }
}

/**
 * A source's configured dedup key against the one its events are keyed by (source_dedup_keys), as
 * start-up compares them (src/inbound/dedup-key-drift.ts): a changed definition under the same version would
 * merge or split events, so the next start refuses it.
 */
export const dedupKeys: Check = {
  name: 'dedup_keys',
  async run({ sql, config }) {
    const problems: string[] = []
    for (const state of await dedupKeyStates<DedupKeyDefinition>(sql, [...config.sources.keys()])) {
      const source = config.sources.get(state.source)
      const keyedBy = eventsKeyedBy(state)
      if (source === undefined || keyedBy === undefined) continue
      const problem = dedupKeyDrift(state.source, keyedBy, configuredDedupKey(source))
      if (problem !== undefined) problems.push(problem)
    }
    if (problems.length === 0) return noFindings()
    return found({
      code: 'config.dedup_key_changed',
      severity: 'error',
      message: `${problems.length} source(s) changed their dedupKey without raising dedupKey.version; the next start refuses it`,
      fix: 'restore the recorded definition, or raise dedupKey.version (new events are then keyed the new way)',
      count: problems.length,
      examples: problems.slice(0, EXAMPLES),
    })
  },
}
