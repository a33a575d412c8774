import { cpSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  checkMigrations,
  MIGRATIONS,
  SCHEMA_FILES,
  snapshotLatestMigration,
} from '../../scripts/migrations.js'
import { temporaryDirectory } from '../support/temp.js'

const workspace = temporaryDirectory('hookledger-migrations-test-')

/**
 * The schema files and one more table, in a file of their own: a schema change not yet migrated.
 * The folder links the project's node_modules, so the file resolves drizzle-orm as the schema does.
 */
function schemaWithOneMoreTable(): string[] {
  symlinkSync(resolve(import.meta.dirname, '../../node_modules'), join(workspace, 'node_modules'), 'dir')
  const file = join(workspace, 'one-more-table.ts')
  writeFileSync(
    file,
    [
      "import { pgTable, text } from 'drizzle-orm/pg-core'",
      "export const webhookNotes = pgTable('webhook_notes', { note: text('note').notNull() })",
      '',
    ].join('\n'),
  )
  return [...SCHEMA_FILES, file]
}

const read = (path: string) => readFileSync(path, 'utf8')
const isSnapshot = (name: string) => name.endsWith('_snapshot.json')
const oneMoreTable = schemaWithOneMoreTable()

describe('migrations (npm run db:check, npm run db:snapshot)', () => {
  // A schema change committed without its migration, or a migration written by hand without the
  // snapshot drizzle-kit diffs against, makes the next developer's `npm run db:generate` write the
  // earlier change again (or fail on a broken snapshot chain, as it did from 0003 to 0009).
  it('npm run db:generate finds nothing to write: the schema files and the last snapshot agree', async () => {
    expect(await checkMigrations()).toBeUndefined()
  }, 60_000)

  it('a schema change without its migration fails the check, saying what db:generate would write', async () => {
    const problem = await checkMigrations(MIGRATIONS, oneMoreTable)
    expect(problem).toMatch(
      /^the schema changed without a migration: the schema files \(src\/db\/schema\.ts, /,
    )
    expect(problem).toContain('CREATE TABLE "webhook_notes"')
    expect(problem).toContain('npm run db:snapshot')
  }, 60_000)

  it('a broken snapshot chain fails the check with what drizzle-kit said (it exits 0 on it)', async () => {
    const migrations = join(workspace, 'broken')
    cpSync(MIGRATIONS, migrations, { recursive: true })
    const [last] = readdirSync(join(migrations, 'meta')).filter(isSnapshot).sort().reverse()
    // Two snapshots with one parent, as two branches that each added a migration leave them.
    cpSync(join(migrations, 'meta', String(last)), join(migrations, 'meta', '9999_snapshot.json'))
    await expect(checkMigrations(migrations)).rejects.toThrow(/could not diff[\s\S]*collision/)
  }, 60_000)

  it('a hand-written migration gets its snapshot; no migration and no journal entry changes', async () => {
    const migrations = join(workspace, 'migrations')
    cpSync(MIGRATIONS, migrations, { recursive: true })
    const journalPath = join(migrations, 'meta', '_journal.json')
    const journal = JSON.parse(read(journalPath)) as { entries: Array<Record<string, unknown>> }
    const idx = journal.entries.length
    const tag = `${String(idx).padStart(4, '0')}_webhook_notes`
    const handWritten = 'CREATE TABLE "webhook_notes" ("note" text NOT NULL);\n'
    writeFileSync(join(migrations, `${tag}.sql`), handWritten)
    journal.entries.push({ idx, version: '7', when: Date.now(), tag, breakpoints: true })
    writeFileSync(journalPath, JSON.stringify(journal, null, 2))
    const journalText = read(journalPath)
    const lastSnapshot = readdirSync(join(migrations, 'meta')).filter(isSnapshot).sort().at(-1)
    const previous = JSON.parse(read(join(migrations, 'meta', String(lastSnapshot)))) as { id: string }

    const report = await snapshotLatestMigration(migrations, oneMoreTable)

    expect(report).toContain(`${tag}.sql does as much`)
    expect(report).toContain('CREATE TABLE "webhook_notes"')
    const snapshot = JSON.parse(read(join(migrations, 'meta', `${tag.slice(0, 4)}_snapshot.json`))) as {
      prevId: string
      tables: Record<string, unknown>
    }
    expect(snapshot.prevId).toBe(previous.id)
    expect(Object.keys(snapshot.tables)).toContain('public.webhook_notes')
    expect(await checkMigrations(migrations, oneMoreTable)).toBeUndefined()
    expect(read(journalPath)).toBe(journalText)
    expect(read(join(migrations, `${tag}.sql`))).toBe(handWritten)
  }, 120_000)
})
