import { createHash } from 'node:crypto'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventIdIsSigned } from '../../src/config/signed-parts.js'
import { verifyConfigSchema } from '../../src/config/verify.js'
import { claimEvents } from '../../src/db/claims.js'
import { inboundEvents } from '../../src/db/schema.js'
import { signWith } from '../../src/inbound/verifiers/index.js'
import { buildConfig } from '../../src/service/config.js'
import { TEST_SECRET } from '../support/signing.js'
import { type ApiStack, createApiStack } from '../support/stack.js'

// GitHub, Shopify and an `hmac` id header are not covered by the signature: a captured delivery
// resent under a fresh id verifies. Those sources also key the claim on the body, so the resend is a
// 200 duplicate of the original row (the sender stops), and nothing is forwarded a second time.

const HMAC_UNSIGNED_ID = {
  scheme: 'hmac',
  secrets: ['hmac-secret'],
  header: 'X-Sig',
  eventId: { header: 'X-Id' },
}
const VERIFY = {
  github: { scheme: 'github', secrets: ['github-secret'] },
  shopify: { scheme: 'shopify', secrets: ['shopify-secret'] },
  hmac: HMAC_UNSIGNED_ID,
  'github-opt-out': { scheme: 'github', secrets: ['github-secret'] },
  std: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
} as const
type SourceId = keyof typeof VERIFY

let stack: ApiStack

beforeAll(async () => {
  const sources = Object.entries(VERIFY).map(([id, verify]) => ({
    id,
    verify,
    ...(id === 'github-opt-out' ? { dedupOnBody: false } : {}),
  }))
  stack = await createApiStack(buildConfig({ sources }, () => undefined))
})
afterAll(async () => {
  await stack.close()
})

/** The delivery the sender made, or an attacker's copy of it under `id`: same bytes, same signature. */
function deliver(source: SourceId, body: string, id: string) {
  const config = verifyConfigSchema.parse(VERIFY[source])
  const headers = signWith(config, config.secrets, {
    raw: Buffer.from(body),
    timestamp: Math.floor(Date.now() / 1000),
    id,
  })
  return stack.app.request(`/webhooks/${source}`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...headers },
  })
}

async function rowsOf(source: string) {
  return stack.database.db.select().from(inboundEvents).where(eq(inboundEvents.source, source))
}

describe('a signed body resent under a fresh event id', () => {
  for (const source of ['github', 'shopify', 'hmac'] as const) {
    it(`${source}: 200 duplicate pointing at the original row, one row, not forwarded again`, async () => {
      const body = JSON.stringify({ action: 'opened', id: `${source}-1`, event_id: `${source}-1` })
      const original = await deliver(source, body, `${source}-original`)
      expect(await original.json()).toMatchObject({ status: 'accepted' })
      const { id } = (await (await deliver(source, body, `${source}-original`)).json()) as { id: string }

      const replay = await deliver(source, body, `${source}-fresh-id`)
      expect(replay.status).toBe(200)
      expect(await replay.json()).toEqual({ status: 'duplicate', id })
      expect((await rowsOf(source)).map((row) => row.eventId)).toEqual([`${source}-original`])

      // Another body is another event, whatever its id.
      const other = await deliver(source, JSON.stringify({ action: 'closed' }), `${source}-second`)
      expect(await other.json()).toMatchObject({ status: 'accepted' })
    })
  }

  it('concurrent replays on separate statements: exactly one is accepted', async () => {
    const body = Buffer.from('{"action":"race"}')
    const payloadHash = createHash('sha256').update(body).digest('hex')
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        claimEvents(stack.database.sql, [
          {
            source: 'github',
            eventId: `race-${i}`,
            eventType: null,
            payloadHash,
            body,
            headers: {},
            bodyKey: payloadHash,
          },
        ]),
      ),
    )
    const kinds = results.map(([result]) => result?.kind)
    expect(kinds.filter((kind) => kind === 'accepted')).toHaveLength(1)
    expect(kinds.filter((kind) => kind === 'replay')).toHaveLength(11)
    expect(new Set(results.map(([result]) => result?.id)).size).toBe(1)
  })

  it('dedupOnBody: false opts a source out: the resend is a new event', async () => {
    const body = '{"action":"same-body"}'
    expect(await (await deliver('github-opt-out', body, 'opt-1')).json()).toMatchObject({
      status: 'accepted',
    })
    expect(await (await deliver('github-opt-out', body, 'opt-2')).json()).toMatchObject({
      status: 'accepted',
    })
  })

  it('a scheme that signs its id (standard-webhooks) keeps body dedup off: equal bodies, two events', async () => {
    const body = '{"type":"same"}'
    expect(await (await deliver('std', body, 'msg_1')).json()).toMatchObject({ status: 'accepted' })
    expect(await (await deliver('std', body, 'msg_2')).json()).toMatchObject({ status: 'accepted' })
  })

  it('which schemes sign their event id', () => {
    const signed = (verify: unknown) => eventIdIsSigned(verifyConfigSchema.parse(verify))
    expect(signed(VERIFY.github)).toBe(false)
    expect(signed(VERIFY.shopify)).toBe(false)
    expect(signed(HMAC_UNSIGNED_ID)).toBe(false)
    expect(signed({ ...HMAC_UNSIGNED_ID, signedContent: '{id}.{body}' })).toBe(true)
    expect(signed({ ...HMAC_UNSIGNED_ID, eventId: { jsonPointer: '/id' } })).toBe(true)
    for (const verify of [
      VERIFY.std,
      { scheme: 'stripe', secrets: ['whsec_x'] },
      { scheme: 'slack', secrets: ['s'] },
      { scheme: 'paddle', secrets: ['s'] },
      { scheme: 'square', secrets: ['s'], notificationUrl: 'https://h.example.com/sq' },
    ]) {
      expect(signed(verify)).toBe(true)
    }
  })
})
