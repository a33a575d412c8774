import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { leaseEvents } from '../../src/db/events.js'
import { forwardArgs } from '../../src/delivery/forward.js'
import { payloadHash } from '../../src/outbound/hash.js'
import { stepKey } from '../../src/outbound/keys.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

// The worker's lease claims a forward's operation in SQL, so the key and the payload hash are computed
// there a second time: they must be exactly what the forward's invoke computes in code, or the invoke
// would find "its" operation under another hash (a payload conflict) instead of taking it.

let database: TestDatabase
beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

const AWKWARD_IDS = [
  'evt_plain',
  'evt:with:colons',
  'evt%3Aencoded%25already',
  'quote"and\\backslash',
  'tab\tnewline\nreturn\rbell\u0007unit\u001f',
  'ünïcödé ☃ 中文',
  'astral 😀 𝄞',
  'separators \u2028\u2029 and \u007f del',
  '/slashes/and?query=1&x=<y>',
  // Around the key limit (255 UTF-16 units for `acme:<id>:forward`, so 242 for the id): kept whole up
  // to it, and past it shortened to `acme:%h<digest>:forward`, in SQL as in code.
  'x'.repeat(242),
  'x'.repeat(243),
  `evt_${'x'.repeat(250)}`,
  'ü'.repeat(242),
  '😀'.repeat(121),
  `😀${'x'.repeat(241)}`,
  `%:${'y'.repeat(239)}`,
  `dk1:${'z%3A'.repeat(250)}`,
]

async function lease(
  source: string,
  eventIds: readonly string[],
  bodies: readonly Buffer[],
  sources: string[],
) {
  const claims = await claimEvents(
    database.sql,
    eventIds.map((eventId, i) => ({
      source,
      eventId,
      eventType: null,
      payloadHash: 'f'.repeat(64),
      body: bodies[i] as Buffer,
      headers: {},
    })),
  )
  const requests = claims.map((claim) => ({ id: claim.id, token: randomUUID(), jobId: `evt-${claim.id}` }))
  return leaseEvents(database.sql, requests, 60_000, { sources, leaseMs: sources.map(() => 70_000) })
}

describe('the lease claims a forward operation as invoke would', () => {
  it('with the same key, payload hash and arguments for awkward event ids and bodies', async () => {
    const bodies = AWKWARD_IDS.map((id, i) =>
      i % 2 === 0 ? Buffer.from(JSON.stringify({ id })) : Buffer.from([0xff, 0x00, 0xfe, i]),
    )
    const results = await lease('acme', AWKWARD_IDS, bodies, ['acme'])
    for (const [i, result] of results.entries()) {
      const eventId = AWKWARD_IDS[i] as string
      if (result.kind !== 'leased') throw new Error(`${eventId} was not leased`)
      const claim = result.row.forwardClaim
      const args = forwardArgs('acme', eventId, bodies[i] as Buffer)
      expect(claim?.operationKey.length, eventId).toBeLessThanOrEqual(255)
      expect(claim, eventId).toMatchObject({
        operationKey: stepKey(['acme', eventId], 'forward'),
        payloadHash: payloadHash(args),
        args,
        tool: 'forward',
        effectClass: 'idempotent',
        status: 'in_progress',
        attempts: 1,
        runId: `${result.row.id}/1`,
      })
      expect(claim?.leaseToken).toMatch(/^[0-9a-f-]{36}$/)
      expect(claim?.leaseUntil?.getTime()).toBeGreaterThan(Date.now() + 60_000)
    }
    // The claim's writes are invoke's: attempt 1 in flight, one `claimed` audit row that says so.
    const [attempts] = await database.sql<Array<{ n: number }>>`
      select count(*)::int as n from operation_attempts where attempt = 1 and status = 'in_flight'`
    expect(attempts?.n).toBe(AWKWARD_IDS.length)
    const audit = await database.sql<Array<{ event: string; n: number }>>`
      select event, details->>'attempt' as attempt, count(*)::int as n from operation_audit
      group by 1, 2 order by 1`
    expect(audit).toEqual([{ event: 'claimed', attempt: '1', n: AWKWARD_IDS.length }])
  })

  it('claims nothing for a key that exists or a source not listed', async () => {
    const [again] = await lease('acme', ['evt_plain'], [Buffer.from('{}')], ['acme'])
    // The first test's row: claimed again by id, it is still leased, so nothing is leased here.
    expect(again?.kind).not.toBe('leased')
    await database.sql`update inbound_events set status = 'pending', lease_token = null where event_id = 'evt_plain'`
    const [id] = await database.sql<
      Array<{ id: string }>
    >`select id from inbound_events where event_id = 'evt_plain'`
    const [relet] = await leaseEvents(
      database.sql,
      [{ id: id?.id ?? '', token: randomUUID(), jobId: `evt-${id?.id}` }],
      60_000,
      {
        sources: ['acme'],
        leaseMs: [70_000],
      },
    )
    expect(relet).toMatchObject({ kind: 'leased', row: { forwardClaim: undefined } })

    const [unlisted] = await lease('other', ['evt_other'], [Buffer.from('{}')], ['acme'])
    expect(unlisted).toMatchObject({ kind: 'leased', row: { forwardClaim: undefined } })
    const [operations] = await database.sql<Array<{ n: number }>>`select count(*)::int as n from operations`
    expect(operations?.n).toBe(AWKWARD_IDS.length)
  })
})

describe('keys that fit', () => {
  it('keeps every key that fits as it was, and shortens only what would pass 255', () => {
    expect(stepKey(['acme', 'evt:1%'], 'forward')).toBe('acme:evt%3A1%25:forward')
    const longest = 'x'.repeat(242)
    expect(stepKey(['acme', longest], 'forward')).toBe(`acme:${longest}:forward`)
    const over = stepKey(['acme', `${longest}x`], 'forward')
    expect(over).toMatch(/^acme:%h[A-Za-z0-9_-]{43}:forward$/)
    // The route's key under the same event shortens the id the same way, so one prefix finds both.
    const route = stepKey(['acme', `${longest}x`, 'route'], 'billing')
    expect(route.startsWith(over.slice(0, -'forward'.length))).toBe(true)
    // Many long parts: the first kept, one digest of all the others, still under the limit.
    const many = stepKey(['acme', ...['b', 'c', 'd', 'e', 'f', 'g'].map((letter) => letter.repeat(65))], 's')
    expect(many).toMatch(/^acme:%h[A-Za-z0-9_-]{43}:s$/)
    const deep = stepKey(['s'.repeat(63), 'x'.repeat(300), 'route', 'r'.repeat(63)], 'n'.repeat(128))
    expect(deep.startsWith(`${'s'.repeat(63)}:%h`)).toBe(true)
    expect(deep.length).toBeLessThanOrEqual(255)
    expect(stepKey(['acme', 'x'.repeat(10_000)], 'step-'.repeat(25)).length).toBeLessThanOrEqual(255)
  })
})
