import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { verifyConfigSchema } from '../src/config/verify.js'
import { inboundEvents } from '../src/db/schema.js'
import { createVerifier } from '../src/inbound/verifiers/index.js'
import { buildConfig } from '../src/service/config.js'
import { type ApiStack, createApiStack } from './support/stack.js'
import { storedEvents } from './support/stored-events.js'
import { buildVectorSets, readVectorSets, type VectorCase, type VectorSet } from './support/vectors.js'

// Every conformance vector in fixtures/vectors, run twice: against the verifier alone, and through
// the HTTP app on a real ledger (status codes, and nothing written for a rejection).

const sets = await readVectorSets()
const literal = (reference: string) => reference

function outcomeOf(vector: VectorCase) {
  const verifier = createVerifier(verifyConfigSchema.parse(vector.config), {
    sourceId: 'vectors',
    resolveSecret: literal,
  })
  const result = verifier.verify({
    raw: Buffer.from(vector.body),
    headers: vector.headers,
    now: vector.now * 1000,
  })
  switch (result.kind) {
    case 'verified':
      return { outcome: 'verified', eventId: result.eventId }
    case 'handshake':
      return { outcome: 'handshake', status: 200, response: result.body }
    case 'rejected':
      return { outcome: 'rejected', code: result.code }
  }
}

describe('conformance vectors', () => {
  it('the committed files are exactly what test/support/vectors.ts builds', () => {
    const byScheme = (a: VectorSet, b: VectorSet) => a.scheme.localeCompare(b.scheme)
    expect([...sets].sort(byScheme)).toEqual(buildVectorSets().sort(byScheme))
  })

  it('cover every scheme and, for each, the cases every receiver must get right', () => {
    expect(sets.map((set) => set.scheme).sort()).toEqual(
      ['github', 'hmac', 'paddle', 'shopify', 'slack', 'square', 'standard-webhooks', 'stripe'].sort(),
    )
    const required = [
      'valid',
      'tampered-body',
      'wrong-secret',
      'rotated-secret',
      'several-signatures',
      'malformed-header',
      'missing-header',
      'missing-id',
    ]
    for (const set of sets) {
      const names = set.cases.map((vector) => vector.name)
      expect(names, set.scheme).toEqual(expect.arrayContaining(required))
      expect(new Set(names).size, `${set.scheme}: case names are unique`).toBe(names.length)
      const timestamped = !['github', 'shopify', 'square'].includes(set.scheme)
      if (timestamped)
        expect(names, set.scheme).toEqual(expect.arrayContaining(['expired', 'from-the-future']))
    }
  })

  for (const set of sets) {
    describe(set.scheme, () => {
      for (const vector of set.cases) {
        it(`${vector.name}: ${vector.description}`, () => {
          const { status: _status, ...expected } = vector.expected as VectorCase['expected'] & {
            status?: number
          }
          const actual = outcomeOf(vector)
          if (vector.expected.outcome === 'handshake') {
            expect(actual).toEqual(vector.expected)
          } else {
            expect(actual).toEqual(expected)
          }
        })
      }
    })
  }
})

describe('conformance vectors over HTTP, on a real ledger', () => {
  let stack: ApiStack
  const all = sets.flatMap((set: VectorSet) =>
    set.cases.map((vector, index) => ({ source: `${set.scheme}-${index}`, vector })),
  )

  beforeAll(async () => {
    const config = buildConfig(
      { sources: all.map(({ source, vector }) => ({ id: source, verify: vector.config })) },
      () => undefined,
    )
    stack = await createApiStack(config)
  })
  afterAll(async () => {
    vi.useRealTimers()
    await stack.close()
  })

  it('answers each vector with its status; rejections write nothing, verified vectors write their event', async () => {
    for (const { source, vector } of all) {
      // Only Date is faked: the vectors' clocks are fixed, while sockets and timers run for real.
      vi.useFakeTimers({ toFake: ['Date'] })
      vi.setSystemTime(vector.now * 1000)
      const response = await stack.app.request(`/webhooks/${source}`, {
        method: 'POST',
        body: vector.body,
        headers: vector.headers,
      })
      vi.useRealTimers()
      const answer = (await response.json()) as Record<string, unknown>
      const rows = await storedEvents(stack.database.db, eq(inboundEvents.source, source))
      const label = `${source} (${vector.name})`
      switch (vector.expected.outcome) {
        case 'verified':
          expect(response.status, label).toBe(200)
          expect(answer.status, label).toBe('accepted')
          expect(
            rows.map((row) => row.eventId),
            label,
          ).toEqual([vector.expected.eventId])
          expect(rows[0]?.body.toString('utf8'), label).toBe(vector.body)
          break
        case 'handshake':
          expect(response.status, label).toBe(200)
          expect(answer, label).toEqual(vector.expected.response)
          expect(rows, label).toEqual([])
          break
        case 'rejected':
          expect(response.status, label).toBe(vector.expected.status)
          expect(answer, label).toMatchObject({ error: { code: vector.expected.code } })
          expect(rows, label).toEqual([])
          break
      }
    }
  })
})
