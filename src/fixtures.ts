import { readdir, readFile, stat } from 'node:fs/promises'
import { basename, extname, join } from 'node:path'

/**
 * A sample delivery, unsigned: the exact body bytes from one file, plus the provider's non-signature
 * headers (`X-GitHub-Event`, `X-Shopify-Topic`, …) from a `<name>.headers` file beside it, one
 * `Name: value` per line — the format `curl -H @file` reads. Signatures are added at send time, with
 * a fresh timestamp, so fixtures never expire. See fixtures/README.md.
 */
export interface Fixture {
  path: string
  body: Buffer
  /** In file order, names as written. */
  headers: Array<[name: string, value: string]>
}

export class FixtureError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'FixtureError'
  }
}

const HEADERS_EXTENSION = '.headers'

/** Reads one fixture: the body file and, when present, its `.headers` sidecar. */
export async function readFixture(path: string): Promise<Fixture> {
  if (path.endsWith(HEADERS_EXTENSION)) {
    throw new FixtureError(`${path}: is a headers file; name the body file beside it`)
  }
  let body: Buffer
  try {
    body = await readFile(path)
  } catch (error) {
    throw new FixtureError(`cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`)
  }
  const headersPath = join(path, '..', `${basename(path, extname(path))}${HEADERS_EXTENSION}`)
  let text: string | undefined
  try {
    text = await readFile(headersPath, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  return { path, body, headers: text === undefined ? [] : parseHeaders(text, headersPath) }
}

export function parseHeaders(text: string, where: string): Array<[string, string]> {
  const headers: Array<[string, string]> = []
  for (const [index, line] of text.split(/\r?\n/).entries()) {
    if (line.trim() === '') continue
    const colon = line.indexOf(':')
    const name = colon > 0 ? line.slice(0, colon).trim() : ''
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) {
      throw new FixtureError(`${where}:${index + 1}: expected "Name: value"`)
    }
    headers.push([name, line.slice(colon + 1).trim()])
  }
  return headers
}

/**
 * Expands the arguments of `replay`: files as given, directories to the fixtures directly inside
 * them (sorted; `.headers`, dotfiles and READMEs skipped).
 */
export async function listFixtures(paths: readonly string[]): Promise<string[]> {
  const found: string[] = []
  for (const path of paths) {
    let info: Awaited<ReturnType<typeof stat>>
    try {
      info = await stat(path)
    } catch (error) {
      throw new FixtureError(`cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`)
    }
    if (!info.isDirectory()) {
      found.push(path)
      continue
    }
    const entries = await readdir(path, { withFileTypes: true })
    const files = entries
      .filter((entry) => entry.isFile())
      .map((entry) => entry.name)
      .filter((name) => !name.startsWith('.') && !name.endsWith(HEADERS_EXTENSION) && !/^readme/i.test(name))
      .sort()
    if (files.length === 0) throw new FixtureError(`${path}: holds no fixtures`)
    found.push(...files.map((name) => join(path, name)))
  }
  return found
}

/** The value of header `name` (any case) among `headers`. */
export function headerValue(
  headers: ReadonlyArray<readonly [string, string]>,
  name: string,
): string | undefined {
  const lower = name.toLowerCase()
  return headers.find(([key]) => key.toLowerCase() === lower)?.[1]
}
