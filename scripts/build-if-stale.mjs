// Compiles src/ into dist/ only when a source is newer than the last build, so `npm start`,
// `npx hookledger` and the test suite's child processes share one build instead of each paying
// tsc's 25-60 s. Used by bin/hookledger.js (in a clone), test/support/global-setup.ts, and
// `npm run build` (`--force`: always; exits non-zero when tsc fails).
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
/** Written after a successful build, dated when that build began: an edit made during it counts as newer. */
const STAMP = join('dist', '.build-stamp')
const BUILD_INPUTS = ['tsconfig.json', 'tsconfig.build.json', 'package.json']

/**
 * Unit tests beside the code (`*.test.ts`) are not compiled into dist/, so editing one needs no build.
 * @param {string} directory
 * @returns {number}
 */
function newestSourceMtime(directory) {
  let newest = 0
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name)
    if (entry.isDirectory()) newest = Math.max(newest, newestSourceMtime(path))
    else if (!entry.name.endsWith('.test.ts')) newest = Math.max(newest, statSync(path).mtimeMs)
  }
  return newest
}

/**
 * Why dist/ must be rebuilt, or undefined when it is up to date.
 * @param {string} root the package's folder
 * @returns {string | undefined}
 */
export function staleReason(root = ROOT) {
  const stamp = join(root, STAMP)
  if (!existsSync(stamp)) return 'dist/ has not been built'
  const built = statSync(stamp).mtimeMs
  const inputs = BUILD_INPUTS.map((name) => statSync(join(root, name)).mtimeMs)
  if (Math.max(newestSourceMtime(join(root, 'src')), ...inputs) > built)
    return 'sources changed since the last build'
  return undefined
}

/** Builds dist/ when stale (or always, with `force`); returns whether it built. Throws when tsc reports errors. */
export function buildIfStale({ force = false } = {}) {
  const reason = force ? 'npm run build' : staleReason()
  if (reason === undefined) return false
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  if (!existsSync(tsc)) {
    throw new Error(`${reason}, and typescript is not installed to build it: run npm ci first`)
  }
  process.stderr.write(`hookledger: building dist/ (${reason})…\n`)
  const began = new Date()
  // A clean build: a source that was deleted or renamed leaves no module behind in dist/.
  rmSync(join(ROOT, 'dist'), { recursive: true, force: true })
  const result = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json')], {
    cwd: ROOT,
    // tsc reports on stdout; stderr keeps the command's own stdout (signed headers, say) clean.
    stdio: ['ignore', 2, 2],
  })
  if (result.status !== 0)
    throw new Error(`building dist/ failed (tsc exit ${result.status ?? result.signal})`)
  writeFileSync(join(ROOT, STAMP), '')
  utimesSync(join(ROOT, STAMP), began, began)
  return true
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    buildIfStale({ force: process.argv.includes('--force') })
  } catch (error) {
    process.stderr.write(`hookledger: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  }
}
