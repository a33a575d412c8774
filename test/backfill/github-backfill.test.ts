import { sign } from '@octokit/webhooks-methods'
import { eq } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runBackfillPass } from '../../src/backfill/pass.js'
import type { Config, Source } from '../../src/config/config.js'
import { backfillCursors, backfillRedeliveries, inboundEvents } from '../../src/db/schema.js'
import { createLogger } from '../../src/logger.js'
import { buildConfig } from '../../src/service/config.js'
import { type MockDelivery, type MockGithub, startMockGithub } from '../support/mock-github.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { startSink } from '../support/sink.js'

// GitHub never redelivers by itself: a pass lists the hook's deliveries from a local GitHub API and
// asks for the failed ones again, once each; the redeliveries arrive signed at /webhooks/github.

const TOKEN = 'ghp_backfillMockToken000000000000000000'
const SECRET = 'github-backfill-test-secret'
const HOOK = { owner: 'acme', repo: 'shop', hookId: 7 }
const logger = createLogger('silent')

let github: MockGithub
let sink: Awaited<ReturnType<typeof startSink>>
let running: TestService
let config: Config

function buildSources(options: { token?: string; hookId?: number } = {}): Config {
  const source = (id: string, backfill: Record<string, unknown> = {}) => ({
    id,
    verify: { scheme: 'github', secrets: [SECRET] },
    handler: { type: 'forward', url: sink.url },
    backfill: {
      enabled: false,
      credential: 'env:GITHUB_TOKEN',
      apiBaseUrl: github.baseUrl,
      repository: `${HOOK.owner}/${HOOK.repo}`,
      hookId: options.hookId ?? HOOK.hookId,
      pageSize: 2,
      maxWaitSeconds: 3,
      ...backfill,
    },
  })
  return buildConfig(
    {
      sources: [source('github'), source('paged', { maxPagesPerPass: 1 })],
      worker: FAST_WORKER,
      relay: FAST_RELAY,
    },
    (name) => (name === 'GITHUB_TOKEN' ? (options.token ?? TOKEN) : undefined),
  )
}

const sourceOf = (id: string, from: Config = config): Source => {
  const source = from.sources.get(id)
  if (source === undefined) throw new Error(`no source ${id}`)
  return source
}

const pass = (id: string, from: Config = config) =>
  runBackfillPass({ sql: running.database.sql, logger }, sourceOf(id, from))

const minutesAgo = (minutes: number) => new Date(Date.now() - minutes * 60_000)

function issueBody(number: number): string {
  return JSON.stringify({
    action: 'opened',
    issue: { number, title: `issue ${number}` },
    repository: { id: 42 },
  })
}

function deliver(guid: string, minutes: number, statusCode: number): MockDelivery {
  return github.addDelivery({
    guid,
    event: 'issues',
    body: issueBody(guid.length + minutes),
    deliveredAt: minutesAgo(minutes),
    statusCode,
  })
}

async function sendSigned(guid: string, body: string) {
  return fetch(`${running.url}/webhooks/github`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-delivery': guid,
      'x-github-event': 'issues',
      'x-hub-signature-256': await sign(SECRET, body),
    },
    body,
  })
}

const rowsOf = (source: string) =>
  running.database.db
    .select({ eventId: inboundEvents.eventId, status: inboundEvents.status, origin: inboundEvents.origin })
    .from(inboundEvents)
    .where(eq(inboundEvents.source, source))

const idOf = (guid: string, statusCode: number) =>
  github.deliveries.find((delivery) => delivery.guid === guid && delivery.status_code === statusCode)?.id

beforeAll(async () => {
  sink = await startSink(() => ({ status: 200, body: 'ok' }))
  github = await startMockGithub({ ...HOOK, token: TOKEN, secret: SECRET })
  config = buildSources()
  running = await startTestService({ config })
  github.receiverUrl = `${running.url}/webhooks/github`

  deliver('guid-delivered', 60, 200)
  deliver('guid-lost-1', 50, 502)
  deliver('guid-lost-2', 40, 0)
  // Someone already tried this one again by hand; it failed too. The newest attempt is asked for.
  deliver('guid-lost-2', 39, 0)
  deliver('guid-held', 30, 504)
  deliver('guid-fixed', 20, 500)
  deliver('guid-fixed', 19, 200)
  deliver('guid-unreachable', 10, 502)
  github.unreachableFor.add('guid-unreachable')
  // Older than lookbackHours (72): GitHub would not redeliver it any more.
  deliver('guid-too-old', 80 * 60, 502)

  // This one reached hookledger, which was too slow to answer: GitHub counts it as failed.
  const held = github.deliveries.find((delivery) => delivery.guid === 'guid-held')
  expect((await sendSigned('guid-held', issueBody('guid-held'.length + 30))).status).toBe(200)
  expect(held).toBeDefined()
})

afterAll(async () => {
  await running?.close()
  await sink?.close()
  await github?.close()
})

describe('a pass over a hook with failed deliveries', () => {
  it('asks for each failed, undelivered delivery exactly once, and the redeliveries are processed to DONE', async () => {
    const expected = [
      idOf('guid-lost-1', 502),
      // The newest failed attempt of a guid tried twice.
      github.deliveries.filter((delivery) => delivery.guid === 'guid-lost-2').at(0)?.id,
      idOf('guid-unreachable', 502),
    ]
    const report = await pass('github')
    expect(report.error).toBeUndefined()
    expect(report.complete).toBe(true)
    expect(report.redelivered.sort()).toEqual(['guid-lost-1', 'guid-lost-2', 'guid-unreachable'])
    expect(report.alreadyInLedger).toBe(1)
    // Pages of two, followed through the Link header's cursor.
    expect(report.pages).toBeGreaterThan(1)
    expect(github.requests.some((request) => request.query.has('cursor'))).toBe(true)
    for (const request of github.requests) {
      expect(request.headers.authorization).toBe(`Bearer ${TOKEN}`)
      expect(request.headers.accept).toBe('application/vnd.github+json')
      expect(request.headers['x-github-api-version']).toBe('2022-11-28')
    }
    // Never the delivered, repaired, held or too old ones.
    expect([...github.redeliveryRequests].sort()).toEqual(expected.sort())

    await github.settled()
    await expect
      .poll(async () => (await rowsOf('github')).filter((row) => row.status === 'done').length, {
        timeout: 20_000,
      })
      .toBe(3)
    const rows = await rowsOf('github')
    expect(rows.map((row) => row.eventId).sort()).toEqual(['guid-held', 'guid-lost-1', 'guid-lost-2'])
    // They arrived signed, as webhooks: nothing was claimed from the API's summaries.
    for (const row of rows) expect(row.origin).toBe('webhook')
    for (const guid of ['guid-lost-1', 'guid-lost-2']) {
      expect(
        sink.received.filter((request) => request.headers['x-hookledger-event-id'] === guid),
      ).toHaveLength(1)
    }
    const recorded = await running.database.db
      .select()
      .from(backfillRedeliveries)
      .where(eq(backfillRedeliveries.source, 'github'))
    expect(recorded.map((row) => row.guid).sort()).toEqual(['guid-lost-1', 'guid-lost-2', 'guid-unreachable'])
  })

  it('never asks twice: the next pass leaves the delivery whose redelivery failed again alone', async () => {
    // The redelivery of guid-unreachable failed again (GitHub lists it as a failed redelivery).
    expect(
      github.deliveries.filter((delivery) => delivery.guid === 'guid-unreachable' && delivery.redelivery),
    ).toHaveLength(1)
    const before = github.redeliveryRequests.length
    const report = await pass('github')
    expect(report.error).toBeUndefined()
    expect(report.redelivered).toEqual([])
    expect(report.alreadyRequested).toBe(1)
    expect(github.redeliveryRequests.length).toBe(before)
  })
})

describe('paging and limits', () => {
  it('resumes a sweep from the cursor where a bounded pass stopped', async () => {
    const first = await pass('paged')
    expect(first).toMatchObject({ pages: 1, complete: false })
    const [saved] = await running.database.db
      .select()
      .from(backfillCursors)
      .where(eq(backfillCursors.source, 'paged'))
    expect(saved?.sweepResume).toMatch(/^v1_\d+$/)
    const second = await pass('paged')
    expect(second.resumedAfter).toBe(saved?.sweepResume)
    const listRequests = github.requests.filter((request) => request.method === 'GET')
    expect(listRequests.at(-1)?.query.get('cursor')).toBe(saved?.sweepResume)
    expect(listRequests.at(-1)?.query.get('per_page')).toBe('2')
  })

  it('waits for X-RateLimit-Reset when an answer reports the limit spent, instead of being refused', async () => {
    github.rateLimit.remaining = 1
    github.rateLimit.resetAt = Math.floor(Date.now() / 1000) + 2
    const report = await pass('github')
    expect(report.error).toBeUndefined()
    expect(report.pages).toBeGreaterThan(1)
    expect(github.refusals).toBe(0)
  })

  it('stops with rate_limited when the limit resets later than maxWaitSeconds, and says when', async () => {
    github.rateLimit.remaining = 0
    github.rateLimit.resetAt = Math.floor(Date.now() / 1000) + 3600
    const report = await pass('github')
    expect(report.error?.code).toBe('rate_limited')
    expect(report.error?.message).toMatch(/GitHub answered 403 \(rate limited: API rate limit exceeded/)
    expect(report.error?.message).toMatch(/longer than backfill.maxWaitSeconds \(3 s\)/)
    github.rateLimit.remaining = 5000
  })

  it('names the token variable on a 401, and the repository and hook on a 404', async () => {
    const unauthorized = await pass('github', buildSources({ token: 'ghp_revoked' }))
    expect(unauthorized.error?.code).toBe('unauthorized')
    expect(unauthorized.error?.message).toMatch(
      /GitHub API rejected the key in GITHUB_TOKEN \(401: Bad credentials\)/,
    )
    const missing = await pass('github', buildSources({ hookId: 999 }))
    expect(missing.error?.code).toBe('not_found')
    expect(missing.error?.message).toMatch(
      /\/repos\/acme\/shop\/hooks\/999\/deliveries \(404: Not Found\); check the configured repository and hookId/,
    )
  })
})
