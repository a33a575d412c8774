// drizzle-kit diffs the schema files against the last snapshot in migrations/meta to write the next
// migration, so that snapshot must always describe the schema the migrations build.
//   `npm run db:check`     fails when the schema files differ from it (a schema change committed
//                          without its migration); CI runs it, and test/build/migrations.test.ts.
//   `npm run db:snapshot`  gives the latest migration, written by hand, the snapshot of the schema
//                          files as they are now (drizzle-kit writes none for hand-written SQL).
// Both run drizzle-kit on a copy of migrations/: the check writes nothing, and the snapshot command
// writes only migrations/meta/<latest>_snapshot.json, never a migration or the journal, which
// deployed databases have applied.
import { execFile } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative, resolve } from 'node:path'
import { promisify } from 'node:util'
import drizzleConfig from '../drizzle/drizzle.config.js'

const ROOT = resolve(import.meta.dirname, '..')
const DRIZZLE_KIT = join(ROOT, 'node_modules', 'drizzle-kit', 'bin.cjs')
/** The migrations folder and schema files of drizzle/drizzle.config.ts, as absolute paths. */
export const MIGRATIONS = resolve(ROOT, drizzleConfig.out ?? 'drizzle')
export const SCHEMA_FILES = [drizzleConfig.schema ?? []].flat().map((file) => resolve(ROOT, file))
/** The `prevId` of a first snapshot. */
const NO_PARENT = '00000000-0000-0000-0000-000000000000'

interface Snapshot {
  id: string
  prevId: string
  [field: string]: unknown
}

interface Journal {
  entries: Array<{ idx: number; tag: string }>
}

interface Generated {
  /** The newest snapshot in the folder, which drizzle-kit diffed against (a file name in meta/). */
  latest: string | undefined
  /** What `npm run db:generate` would write next; undefined when the schema files match `latest`. */
  next: { sql: string; snapshot: Snapshot } | undefined
}

const snapshotsIn = (migrations: string) =>
  readdirSync(join(migrations, 'meta'))
    .filter((name) => /^\d+_snapshot\.json$/.test(name))
    .sort()

const readJson = <T>(path: string): T => JSON.parse(readFileSync(path, 'utf8')) as T

/**
 * `npm run db:generate` on a copy of `migrations`: what it would write next, if anything. drizzle-kit
 * exits 0 even when it cannot read the snapshots (a malformed one, two with the same parent), so
 * anything other than a new migration or its "No schema changes" is thrown with its output.
 */
export async function generateOnCopy(
  migrations = MIGRATIONS,
  schemaFiles = SCHEMA_FILES,
): Promise<Generated> {
  const folder = mkdtempSync(join(tmpdir(), 'hookledger-migrations-'))
  try {
    const copy = join(folder, 'migrations')
    cpSync(migrations, copy, { recursive: true })
    const before = new Set([...readdirSync(copy), ...readdirSync(join(copy, 'meta'))])
    // drizzle-kit reads the snapshots through paths relative to its working folder, so the copy gets
    // a config of its own with `out` relative to it.
    writeFileSync(
      join(folder, 'drizzle.config.cjs'),
      `module.exports = ${JSON.stringify({ ...drizzleConfig, schema: schemaFiles, out: './migrations' })}\n`,
    )
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [DRIZZLE_KIT, 'generate', '--config', 'drizzle.config.cjs', '--name', 'next'],
      { cwd: folder, timeout: 120_000 },
    ).catch((error: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(
        `drizzle-kit generate failed: ${error.message}\n${error.stdout ?? ''}${error.stderr ?? ''}`,
      )
    })
    const latest = snapshotsIn(copy)
      .filter((name) => before.has(name))
      .at(-1)
    const sqlFile = readdirSync(copy).find((name) => !before.has(name) && name.endsWith('.sql'))
    const snapshotFile = snapshotsIn(copy).find((name) => !before.has(name))
    if (sqlFile !== undefined && snapshotFile !== undefined) {
      return {
        latest,
        next: {
          sql: readFileSync(join(copy, sqlFile), 'utf8'),
          snapshot: readJson<Snapshot>(join(copy, 'meta', snapshotFile)),
        },
      }
    }
    if (`${stdout}${stderr}`.includes('No schema changes')) return { latest, next: undefined }
    throw new Error(
      `drizzle-kit could not diff the schema files against migrations/meta:\n${stdout}${stderr}`,
    )
  } finally {
    rmSync(folder, { recursive: true, force: true })
  }
}

/** A path as the developer types it: relative to the project, unless it lies outside. */
const shown = (path: string) => (relative(ROOT, path).startsWith('..') ? path : relative(ROOT, path))

/** Why `npm run db:check` fails, or undefined when the schema files match the last snapshot. */
export async function checkMigrations(
  migrations = MIGRATIONS,
  schemaFiles = SCHEMA_FILES,
): Promise<string | undefined> {
  const { latest, next } = await generateOnCopy(migrations, schemaFiles)
  if (next === undefined) return undefined
  return [
    `the schema changed without a migration: the schema files (${schemaFiles.map(shown).join(', ')}) differ from ${shown(join(migrations, 'meta', latest ?? '(no snapshot)'))}, and \`npm run db:generate\` would write:`,
    '',
    next.sql.trim(),
    '',
    'Run `npm run db:generate -- --name <change>` and commit the migration and snapshot it writes; after a',
    'migration written by hand, run `npm run db:snapshot` to give it its snapshot.',
  ].join('\n')
}

/**
 * Writes the snapshot of the schema files as they are now for the latest migration in the journal
 * (migrations/meta/<its number>_snapshot.json, replacing one that `db:generate --custom` copied from
 * the migration before), chained to the snapshot before it. Returns what it did, with the SQL
 * drizzle-kit would have written for the change, to hold the hand-written SQL against.
 */
export async function snapshotLatestMigration(
  migrations = MIGRATIONS,
  schemaFiles = SCHEMA_FILES,
): Promise<string> {
  const last = readJson<Journal>(join(migrations, 'meta', '_journal.json')).entries.at(-1)
  if (last === undefined)
    throw new Error('the journal lists no migration yet: write one with npm run db:generate')
  if (!existsSync(join(migrations, `${last.tag}.sql`))) {
    throw new Error(
      `the journal's latest migration ${last.tag} has no ${last.tag}.sql in ${shown(migrations)}`,
    )
  }
  const number = String(last.idx).padStart(4, '0')
  const { latest, next } = await generateOnCopy(migrations, schemaFiles)
  if (next === undefined) {
    return latest === `${number}_snapshot.json`
      ? `${last.tag}'s snapshot already matches the schema files; nothing written`
      : `the schema files match migrations/meta/${latest}, from before ${last.tag}: it changes no table, so it needs no snapshot of its own; nothing written`
  }
  const parent = snapshotsIn(migrations)
    .filter((name) => Number.parseInt(name, 10) < last.idx)
    .at(-1)
  const prevId = parent === undefined ? NO_PARENT : readJson<Snapshot>(join(migrations, 'meta', parent)).id
  const path = join(migrations, 'meta', `${number}_snapshot.json`)
  // drizzle-kit's own layout (two spaces, no final newline), so a later db:generate leaves it alone.
  writeFileSync(path, JSON.stringify({ ...next.snapshot, prevId }, null, 2))
  const problem = await checkMigrations(migrations, schemaFiles)
  if (problem !== undefined) throw new Error(`wrote ${shown(path)}, yet the check still fails:\n${problem}`)
  return [
    `wrote ${shown(path)}: the schema files as of ${last.tag}, after ${parent ?? 'no snapshot'}.`,
    `For the same change drizzle-kit would have written the SQL below; check that ${last.tag}.sql does as much:`,
    '',
    next.sql.trim(),
  ].join('\n')
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const command = process.argv[2]
  try {
    if (command === 'check') {
      const problem = await checkMigrations()
      if (problem !== undefined) {
        process.stderr.write(`db:check: ${problem}\n`)
        process.exit(1)
      }
      process.stdout.write('db:check: the schema files match the last snapshot in migrations/meta\n')
    } else if (command === 'snapshot') {
      process.stdout.write(`db:snapshot: ${await snapshotLatestMigration()}\n`)
    } else {
      process.stderr.write('usage: tsx scripts/migrations.ts check|snapshot\n')
      process.exit(2)
    }
  } catch (error) {
    process.stderr.write(`db:${command}: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  }
}
