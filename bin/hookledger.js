#!/usr/bin/env -S node --
// The `--` above ends node's own options: node 20 otherwise takes `--env-file PATH` anywhere on the
// command line as its own flag, and answers a missing file with `node: PATH: not found` (exit 9)
// before this file runs. After `--`, the flag reaches src/cli/env-file.ts.
import { existsSync } from 'node:fs'

// In a clone (src/ present), dist/ is compiled first when missing or older than the sources, so
// `npx hookledger` and `npm start` work right after `npm ci` and never run stale code. An installed
// package ships dist/ without src/ and runs it as is.
if (existsSync(new URL('../src', import.meta.url))) {
  const { buildIfStale } = await import('../scripts/build-if-stale.mjs')
  try {
    buildIfStale()
  } catch (error) {
    process.stderr.write(`hookledger: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  }
}
await import('../dist/cli/main.js')
