import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'

// The house's floors, from the ground up (README, Layout): a file may import its own room and the
// rooms on floors below it, never one on its own floor or above. A contract that wants to climb
// belongs in the lower room.
const FLOORS: readonly (readonly string[])[] = [
  [
    'logger.ts',
    'metrics.ts',
    'tracing.ts',
    'backoff.ts',
    'assert.ts',
    'failpoints.ts',
    'fixtures.ts',
    'json-pointer.ts',
  ],
  ['deadline.ts'],
  ['config'],
  ['db'],
  ['queue'],
  ['outbound'],
  ['inbound'],
  ['delivery', 'backfill', 'retention', 'doctor', 'testing.ts'],
  ['http', 'alerts'],
  ['service'],
  ['cli', 'index.ts'],
]

const SRC = resolve(import.meta.dirname)
const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]/g

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith('.test.ts') ? [path] : []
  })
}

/** The file an import names: `./a.js` is a.ts or a.tsx. */
function importedFile(from: string, specifier: string): string {
  const path = resolve(dirname(from), specifier)
  const base = path.replace(/\.js$/, '')
  return sourceFiles(dirname(base)).find((file) => file.replace(/\.tsx?$/, '') === base) ?? `${base}.ts`
}

const roomOf = (file: string) => relative(SRC, file).split('/')[0] as string
const floorOf = (room: string) => FLOORS.findIndex((floor) => floor.includes(room))

const files = sourceFiles(SRC)
const imports = new Map(
  files.map((file) => {
    const text = readFileSync(file, 'utf8')
    return [file, [...text.matchAll(IMPORT)].map((match) => importedFile(file, match[1] as string))] as const
  }),
)

describe('the layout', () => {
  it('places every room of src/ on a floor', () => {
    const unplaced = [...new Set(files.map(roomOf))].filter((room) => floorOf(room) === -1)
    expect(unplaced).toEqual([])
  })

  it('has no import that climbs to its own floor or above', () => {
    const climbs = [...imports].flatMap(([file, targets]) =>
      targets
        .filter(
          (target) => roomOf(target) !== roomOf(file) && floorOf(roomOf(target)) >= floorOf(roomOf(file)),
        )
        .map((target) => `${relative(SRC, file)} -> ${relative(SRC, target)}`),
    )
    expect(climbs).toEqual([])
  })

  it('has no circle of files importing each other', () => {
    const circles: string[] = []
    const state = new Map<string, 'open' | 'done'>()
    const visit = (file: string, path: string[]) => {
      if (state.get(file) === 'done') return
      if (state.get(file) === 'open') {
        circles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(SRC, f)).join(' -> '))
        return
      }
      state.set(file, 'open')
      for (const target of imports.get(file) ?? []) visit(target, [...path, file])
      state.set(file, 'done')
    }
    for (const file of files) visit(file, [])
    expect(circles).toEqual([])
  })
})
