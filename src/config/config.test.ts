import { describe, expect, it } from 'vitest'
import { buildConfig, ConfigError } from './config.js'

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
const file = {
  sources: [
    { id: 'example', verify: { scheme: 'standard-webhooks', secrets: ['env:EXAMPLE_SECRET'] } },
    { id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_SECRET'] } },
  ],
}
const lookup = (name: string) => (name === 'EXAMPLE_SECRET' ? SECRET : undefined)

describe('buildConfig with onlySource', () => {
  it("builds that source's verifier without looking up another source's secrets", () => {
    const config = buildConfig(file, lookup, { onlySource: 'example' })
    expect([...config.sources.keys()]).toEqual(['example'])
    expect(config.file.sources.map(({ id }) => id)).toEqual(['example', 'shop'])
  })

  it('still needs every secret without it, as serve does', () => {
    expect(() => buildConfig(file, lookup)).toThrow(
      new ConfigError(
        "invalid config:\n  - source 'shop': verify.secrets[0]: environment variable SHOP_SECRET is not set",
      ),
    )
  })

  it("still checks every source's shape, and duplicate ids among the skipped ones", () => {
    const twice = { sources: [...file.sources, file.sources[1]] }
    expect(() => buildConfig(twice, lookup, { onlySource: 'example' })).toThrow(
      /source 'shop': id is used by another source/,
    )
    const badScheme = {
      sources: [file.sources[0], { id: 'shop', verify: { scheme: 'nope', secrets: ['x'] } }],
    }
    expect(() => buildConfig(badScheme, lookup, { onlySource: 'example' })).toThrow(/source 'shop': verify/)
  })
})
