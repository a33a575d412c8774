import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { REFERENCE_PATH, renderConfigReference } from '../../scripts/config-reference.js'

// docs/configuration.md is generated from the config schema; a schema change without
// `npm run docs:config` would leave the reference saying what the code no longer does.
describe('docs/configuration.md', () => {
  it('is what `npm run docs:config` writes from the config schema today', () => {
    expect(readFileSync(REFERENCE_PATH, 'utf8')).toBe(renderConfigReference())
  })

  it('gives every option its default and unit, the hidden ones included', () => {
    const reference = renderConfigReference()
    expect(reference).toContain('| `outbound.reconcileDelayMs` | integer | `30000` (30 s) | ms |')
    expect(reference).toMatch(
      /\| `sources\[\]\.routes\[\]\.forward\.circuitBreaker\.failureThreshold` \| integer \| `5` \|/,
    )
    expect(reference).toContain('| `worker.maxAttempts` | integer | `8` |')
    expect(reference).toContain('A dead destination fails its event after about 127 s')
  })
})
