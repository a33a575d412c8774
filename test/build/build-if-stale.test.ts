import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { staleReason } from '../../scripts/build-if-stale.mjs'
import { temporaryDirectory } from '../support/temp.js'

const workspace = temporaryDirectory('hookledger-build-')

/** A package folder whose files are all dated `at` (seconds), with or without a build stamp. */
function packageFolder(at: number, built: boolean) {
  const root = mkdtempSync(join(workspace, 'package-'))
  mkdirSync(join(root, 'src', 'cli'), { recursive: true })
  const files = ['tsconfig.json', 'tsconfig.build.json', 'package.json', 'src/index.ts', 'src/cli/main.ts']
  if (built) {
    mkdirSync(join(root, 'dist'))
    files.push('dist/.build-stamp')
  }
  for (const file of files) {
    writeFileSync(join(root, file), '')
    utimesSync(join(root, file), at, at)
  }
  return root
}

function touch(path: string, at: number) {
  writeFileSync(path, '// edited')
  utimesSync(path, at, at)
}

describe('build-if-stale', () => {
  it('builds when dist/ was never built', () => {
    expect(staleReason(packageFolder(1_000, false))).toBe('dist/ has not been built')
  })

  it('does not build again when nothing changed since the stamp', () => {
    expect(staleReason(packageFolder(1_000, true))).toBeUndefined()
  })

  it('builds when a source, however deep, or a build setting is newer than the stamp', () => {
    for (const file of ['src/cli/main.ts', 'src/new-module.ts', 'tsconfig.build.json', 'package.json']) {
      const root = packageFolder(1_000, true)
      touch(join(root, file), 2_000)
      expect(staleReason(root), file).toBe('sources changed since the last build')
    }
  })

  it('ignores unit tests beside the code: they are not part of dist/', () => {
    const root = packageFolder(1_000, true)
    touch(join(root, 'src/cli/main.test.ts'), 2_000)
    expect(staleReason(root)).toBeUndefined()
  })
})
