import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { MIGRATIONS_FOLDER } from '../../src/db/migrate.js'

/**
 * A copy of the migrations folder in `parent` that stops at migration `last` (its journal and
 * snapshots trimmed alike): a ledger as an older release left it, for the upgrade test and bench.
 */
export function migrationsUpTo(last: number, parent: string): string {
  const target = join(parent, `migrations-${String(last).padStart(4, '0')}`)
  cpSync(MIGRATIONS_FOLDER, target, { recursive: true })
  const journalPath = join(target, 'meta', '_journal.json')
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as {
    entries: Array<{ idx: number; tag: string }>
  }
  for (const entry of journal.entries.filter((e) => e.idx > last)) {
    rmSync(join(target, `${entry.tag}.sql`))
    rmSync(join(target, 'meta', `${String(entry.idx).padStart(4, '0')}_snapshot.json`), { force: true })
  }
  journal.entries = journal.entries.filter((e) => e.idx <= last)
  writeFileSync(journalPath, JSON.stringify(journal))
  return target
}
