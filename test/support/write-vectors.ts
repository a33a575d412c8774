// Regenerates fixtures/vectors/*.json from test/support/vectors.ts: `npx tsx test/support/write-vectors.ts`,
// then `npx biome format --write fixtures/vectors`. test/vectors.test.ts fails while the two disagree.
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { buildVectorSets, VECTORS_DIR } from './vectors.js'

for (const set of buildVectorSets()) {
  const path = join(VECTORS_DIR.pathname, `${set.scheme}.json`)
  await writeFile(path, `${JSON.stringify(set, null, 2)}\n`)
  process.stdout.write(`${path}: ${set.cases.length} cases\n`)
}
