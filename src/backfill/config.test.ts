import { describe, expect, it } from 'vitest'
import { describeReport, parseSince } from '../cli/backfill.js'
import { buildConfig } from '../service/config.js'
import { nextCursor } from './github.js'

const stripeSource = (backfill: Record<string, unknown>) => ({
  id: 'stripe',
  verify: { scheme: 'stripe', secrets: ['whsec_unit'] },
  backfill: { credential: 'env:STRIPE_API_KEY', ...backfill },
})
const githubSource = (backfill: Record<string, unknown>) => ({
  id: 'gh',
  verify: { scheme: 'github', secrets: ['s3cret'] },
  backfill: { credential: 'env:GITHUB_TOKEN', ...backfill },
})
const keys = (name: string) => ({ STRIPE_API_KEY: 'sk_test_unit', GITHUB_TOKEN: 'ghp_unit' })[name]
const build = (sources: unknown[], lookup: (name: string) => string | undefined = keys) =>
  buildConfig({ sources }, lookup)

describe('the backfill block', () => {
  it('defaults to the real API, five minutes, three days, and the key from the named variable', () => {
    const source = build([stripeSource({})]).sources.get('stripe')
    expect(source?.backfill).toMatchObject({
      provider: 'stripe',
      apiBaseUrl: 'https://api.stripe.com',
      credential: 'sk_test_unit',
      credentialName: 'STRIPE_API_KEY',
      config: { enabled: true, intervalSeconds: 300, lookbackHours: 72, pageSize: 100, maxPagesPerPass: 50 },
    })
    const github = build([githubSource({ repository: 'acme/shop', hookId: 7 })]).sources.get('gh')
    expect(github?.backfill).toMatchObject({ provider: 'github', apiBaseUrl: 'https://api.github.com' })
  })

  it('refuses at start-up, naming the source and the field', () => {
    const cases: Array<[unknown, string]> = [
      [
        { id: 'slack', verify: { scheme: 'slack', secrets: ['x'] }, backfill: { credential: 'env:K' } },
        "source 'slack': backfill: is available for stripe and github sources, not for scheme 'slack'",
      ],
      [
        githubSource({ hookId: 7 }),
        "source 'gh': backfill.repository: is required for a github source (owner/name)",
      ],
      [
        githubSource({ repository: 'acme/shop' }),
        "source 'gh': backfill.hookId: is required for a github source",
      ],
      [
        stripeSource({ repository: 'acme/shop' }),
        "source 'stripe': backfill.repository: is a github setting; this is a stripe source",
      ],
      [
        stripeSource({ credential: 'sk_live_pasted_here' }),
        "source 'stripe': backfill.credential: must be env:NAME, the environment variable holding the API key",
      ],
      [stripeSource({ intervalSeconds: 0 }), "source 'stripe': backfill.intervalSeconds:"],
      [stripeSource({ eventTypes: Array.from({ length: 21 }, (_, i) => `t${i}`) }), 'backfill.eventTypes'],
    ]
    for (const [source, message] of cases) expect(() => build([source]), message).toThrow(message)
  })

  it('needs the key at start-up only when enabled', () => {
    expect(() => build([stripeSource({})], () => undefined)).toThrow(
      "source 'stripe': backfill.credential: environment variable STRIPE_API_KEY is not set",
    )
    const off = build([stripeSource({ enabled: false })], () => undefined).sources.get('stripe')
    expect(off?.backfill?.credential).toBeUndefined()
    expect(() =>
      buildConfig({ sources: [stripeSource({ enabled: false })] }, () => undefined, { onlySource: 'stripe' }),
    ).toThrow('environment variable STRIPE_API_KEY is not set')
  })
})

describe('hookledger backfill --since', () => {
  const now = Date.parse('2026-12-03T12:00:00Z')
  it('takes an ISO date/time or a span back from now', () => {
    expect(parseSince('2026-12-01T06:30:00Z', now).toISOString()).toBe('2026-12-01T06:30:00.000Z')
    expect(parseSince('2026-12-01', now).toISOString()).toBe('2026-12-01T00:00:00.000Z')
    expect(parseSince('90m', now).toISOString()).toBe('2026-12-03T10:30:00.000Z')
    expect(parseSince('36h', now).toISOString()).toBe('2026-12-02T00:00:00.000Z')
    expect(parseSince('3d', now).toISOString()).toBe('2026-11-30T12:00:00.000Z')
  })

  it('refuses anything else, and the future', () => {
    for (const text of ['yesterday', '3w', '-1d', '2026-13-45', '']) {
      expect(() => parseSince(text, now), text).toThrow(/--since must be an ISO date\/time/)
    }
    expect(() => parseSince('2026-12-04', now)).toThrow('--since 2026-12-04 is in the future')
  })
})

describe("GitHub's Link header", () => {
  it('gives the cursor of rel="next", or null on the last page', () => {
    const link =
      '<https://api.github.com/repositories/1/hooks/2/deliveries?per_page=2&cursor=v1_11>; rel="prev", ' +
      '<https://api.github.com/repositories/1/hooks/2/deliveries?per_page=2&cursor=v1_9>; rel="next"'
    expect(nextCursor(link)).toBe('v1_9')
    expect(nextCursor('<https://api.github.com/x?cursor=v1_1>; rel="prev"')).toBeNull()
    expect(nextCursor(null)).toBeNull()
  })
})

describe('the printed report', () => {
  it('says where an unfinished sweep stopped and why', () => {
    const base = {
      source: 'gh',
      provider: 'github' as const,
      since: new Date('2026-12-01T00:00:00Z'),
      resumedAfter: 'v1_9',
      pages: 1,
      listed: 2,
      claimed: [],
      duplicates: 0,
      conflicts: [],
      redelivered: ['guid-1'],
      alreadyRequested: 0,
      alreadyInLedger: 1,
      complete: false,
    }
    expect(describeReport(base)).toBe(
      "source 'gh' (github): listed 2 deliveries since 2026-12-01T00:00:00.000Z, resuming after v1_9, in 1 page(s)\n" +
        '  asked GitHub to redeliver 1 failed delivery(ies): guid-1\n' +
        '  0 failed delivery(ies) already asked for by an earlier pass\n' +
        '  1 failed delivery(ies) whose event is in the ledger anyway\n' +
        '  stopped at backfill.maxPagesPerPass; the next pass continues from here\n',
    )
    expect(describeReport({ ...base, error: { code: 'rate_limited', message: 'wait' } })).toContain(
      '  stopped: rate_limited: wait\n',
    )
  })
})
