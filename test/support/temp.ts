import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll } from 'vitest'

/**
 * A fresh folder under the system's temporary directory, removed after the file's tests. Called at a
 * file's top level or in a describe block, where hooks may be registered.
 */
export function temporaryDirectory(prefix: string): string {
  const directory = mkdtempSync(join(tmpdir(), prefix))
  afterAll(() => rmSync(directory, { recursive: true, force: true }))
  return directory
}
