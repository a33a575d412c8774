import { execFile } from 'node:child_process'
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'

const root = resolve(import.meta.dirname, '../..')
const drizzleKit = join(root, 'node_modules', 'drizzle-kit', 'bin.cjs')
const folders: string[] = []

afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true })
})

/**
 * `npm run db:generate` on a copy of migrations/: drizzle-kit diffs src/db/schema.ts and
 * outbound-schema.ts against the last snapshot in meta/ and writes what differs as the next
 * migration. Its `out` must be relative to the working folder, so the copy gets a config of its own.
 */
async function generateOnCopy(): Promise<{ output: string; written: string[] }> {
  const folder = mkdtempSync(join(tmpdir(), 'hookledger-migrations-'))
  folders.push(folder)
  cpSync(join(root, 'migrations'), join(folder, 'migrations'), { recursive: true })
  const before = new Set(readdirSync(join(folder, 'migrations')))
  writeFileSync(
    join(folder, 'drizzle.config.js'),
    `module.exports = ${JSON.stringify({
      dialect: 'postgresql',
      schema: [join(root, 'src/db/schema.ts'), join(root, 'src/db/outbound-schema.ts')],
      out: './migrations',
      strict: true,
    })}\n`,
  )
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath,
    [drizzleKit, 'generate', '--config', 'drizzle.config.js', '--name', 'unexpected'],
    { cwd: folder },
  )
  const written = readdirSync(join(folder, 'migrations')).filter((name) => !before.has(name))
  return { output: `${stdout}${stderr}`, written }
}

describe('migrations', () => {
  // A schema change committed without its migration, or a migration written by hand without the
  // snapshot drizzle-kit diffs against, makes the next developer's `npm run db:generate` write the
  // earlier change again (or fail on a broken snapshot chain, as it did from 0003 to 0009).
  it('npm run db:generate finds nothing to write: the schema files and the last snapshot agree', async () => {
    const { output, written } = await generateOnCopy()
    expect(written).toEqual([])
    expect(output).toContain('No schema changes')
  }, 60_000)
})
