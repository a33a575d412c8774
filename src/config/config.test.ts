import { describe, expect, it } from 'vitest'
import { buildConfig } from '../service/config.js'
import { ConfigError } from './config.js'

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

describe('evidence rules and dedup keys in the config', () => {
  const withSource = (extra: Record<string, unknown>) => ({
    sources: [{ id: 'stripe', verify: { scheme: 'stripe', secrets: ['whsec_x'] }, ...extra }],
  })

  it('accepts a rule with its pointers, and a dedup key of pointers and headers', () => {
    const config = buildConfig(
      withSource({
        evidence: [
          {
            eventTypes: ['payment_intent.succeeded', 'payment_intent.payment_failed'],
            operationKey: '/data/object/metadata/hookledger_key',
            downstreamId: '/data/object/latest_charge',
            failure: { pointer: '/type', values: ['payment_intent.payment_failed'] },
            settles: { tools: ['stripe.charge'], keyPrefixes: ['order_'] },
          },
        ],
        dedupKey: {
          parts: [{ pointer: '/id' }, { header: 'stripe-account', trusted: true }],
          scope: 'event_type',
        },
      }),
      () => undefined,
    )
    expect(config.sources.get('stripe')?.config.dedupKey?.version).toBe(1)
  })

  it('refuses an event type named by two rules, a key that is not a pointer, and unknown fields', () => {
    const rule = {
      eventTypes: ['charge.succeeded'],
      operationKey: '/data/object/metadata/k',
      settles: { tools: ['stripe.charge'] },
    }
    expect(() => buildConfig(withSource({ evidence: [rule, rule] }), () => undefined)).toThrow(
      /source 'stripe': evidence\[1\]\.eventTypes: event type 'charge\.succeeded' is named by two evidence rules/,
    )
    expect(() =>
      buildConfig(withSource({ evidence: [{ ...rule, operationKey: 'metadata.k' }] }), () => undefined),
    ).toThrow(/evidence\[0\]\.operationKey: must be a JSON pointer/)
    expect(() => buildConfig(withSource({ evidence: [{ ...rule, failure: 'x' }] }), () => undefined)).toThrow(
      ConfigError,
    )
  })

  it("refuses a rule that does not say what it settles, or names the service's own tools", () => {
    const rule = { eventTypes: ['charge.succeeded'], operationKey: '/data/object/metadata/k' }
    expect(() => buildConfig(withSource({ evidence: [rule] }), () => undefined)).toThrow(
      /evidence\[0\]\.settles: is required: say what this rule may settle, e\.g\. "settles": \{ "tools": \["stripe\.charge"\], "keyPrefixes": \["order_"\] \}/,
    )
    expect(() => buildConfig(withSource({ evidence: [{ ...rule, settles: {} }] }), () => undefined)).toThrow(
      /evidence\[0\]\.settles: needs "tools", "keyPrefixes" or both/,
    )
    for (const tool of ['forward', 'alert.slack']) {
      expect(
        () =>
          buildConfig(withSource({ evidence: [{ ...rule, settles: { tools: [tool] } }] }), () => undefined),
        tool,
      ).toThrow(/names a tool of the service itself \(forward, alert\.\*\): evidence never settles those/)
    }
  })

  it('refuses an empty list of parts, a header in capitals and a version below 1', () => {
    for (const dedupKey of [
      { parts: [] },
      { parts: [{ header: 'X-Id' }] },
      { version: 0 },
      { parts: [{}] },
    ]) {
      expect(() => buildConfig(withSource({ dedupKey }), () => undefined), JSON.stringify(dedupKey)).toThrow(
        /source 'stripe': dedupKey/,
      )
    }
  })
})

describe('database.statementTimeoutMs', () => {
  const one = { sources: [file.sources[0]] }

  it('has a deadline for each part of the process by default, and takes one part set alone', () => {
    expect(buildConfig(one, lookup).file.database.statementTimeoutMs).toEqual({
      request: 5000,
      worker: 15_000,
      relay: 10_000,
      retention: 60_000,
      reconciler: 15_000,
      alerts: 30_000,
      backfill: 15_000,
    })
    const set = buildConfig({ ...one, database: { statementTimeoutMs: { request: 2000 } } }, lookup)
    expect(set.file.database.statementTimeoutMs).toMatchObject({ request: 2000, worker: 15_000 })
  })

  it('refuses a deadline under 100 ms, naming the part', () => {
    expect(() => buildConfig({ ...one, database: { statementTimeoutMs: { relay: 10 } } }, lookup)).toThrow(
      /database\.statementTimeoutMs\.relay: Too small/,
    )
  })
})
