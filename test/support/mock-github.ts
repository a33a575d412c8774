import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { sign } from '@octokit/webhooks-methods'

// A local GitHub REST API serving exactly the two documented repository-webhook endpoints:
// - "List deliveries for a repository webhook": GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries,
//   `per_page` (default 30, max 100) and `cursor`, newest first, the next page's cursor in the Link
//   header (rel="next"), each item { id, guid, delivered_at, redelivery, duration, status,
//   status_code, event, action, installation_id, repository_id };
// - "Redeliver a delivery for a repository webhook": POST …/deliveries/{delivery_id}/attempts,
//   202 Accepted, after which GitHub sends the delivery again, signed, with its original guid.
// Every answer carries the x-ratelimit-* headers; with the limit spent, 403 and
// x-ratelimit-remaining: 0 until x-ratelimit-reset. Bad token: 401 "Bad credentials"; another
// repository or hook: 404 "Not Found".

export interface MockDelivery {
  id: number
  guid: string
  delivered_at: string
  redelivery: boolean
  duration: number
  status: string
  status_code: number
  event: string
  action: string | null
  installation_id: number | null
  repository_id: number
}

interface Payload {
  event: string
  body: string
}

export interface MockGithub {
  baseUrl: string
  /** Newest first, as the API lists them. */
  deliveries: MockDelivery[]
  /** Delivery ids whose redelivery was asked for, in order. */
  redeliveryRequests: number[]
  requests: Array<{ method: string; path: string; query: URLSearchParams; headers: IncomingHttpHeaders }>
  rateLimit: { limit: number; remaining: number; resetAt: number }
  /** Guids whose redelivery GitHub fails to deliver (the endpoint is still unreachable). */
  unreachableFor: Set<string>
  /** Records a delivery GitHub made (or failed to make) at `deliveredAt`; the body is kept for redelivery. */
  addDelivery(input: {
    guid: string
    event: string
    body: string
    deliveredAt: Date
    statusCode: number
  }): MockDelivery
  /** Answers refused for the rate limit (403 with x-ratelimit-remaining: 0). */
  refusals: number
  /** Where the hook points (set once the receiver is listening). */
  receiverUrl: string
  /** Waits until every redelivery asked for so far has been sent and answered. */
  settled(): Promise<void>
  close(): Promise<void>
}

export async function startMockGithub(options: {
  owner: string
  repo: string
  hookId: number
  token: string
  /** Redeliveries are signed with it and POSTed to `receiverUrl`. */
  secret: string
}): Promise<MockGithub> {
  const deliveries: MockDelivery[] = []
  const payloads = new Map<number, Payload>()
  const redeliveryRequests: number[] = []
  const requests: MockGithub['requests'] = []
  const unreachableFor = new Set<string>()
  const rateLimit = { limit: 5000, remaining: 5000, resetAt: Math.floor(Date.now() / 1000) + 3600 }
  const pending = new Set<Promise<void>>()
  let nextId = 1000
  const hookPath = `/repos/${options.owner}/${options.repo}/hooks/${options.hookId}/deliveries`

  const record = (input: {
    guid: string
    event: string
    body: string
    deliveredAt: Date
    statusCode: number
    redelivery: boolean
  }) => {
    const action = (JSON.parse(input.body) as { action?: string }).action ?? null
    const delivery: MockDelivery = {
      id: nextId++,
      guid: input.guid,
      delivered_at: input.deliveredAt.toISOString().replace(/\.\d{3}Z$/, 'Z'),
      redelivery: input.redelivery,
      duration: 0.03,
      status:
        input.statusCode >= 200 && input.statusCode < 300
          ? 'OK'
          : input.statusCode === 0
            ? 'failed to connect'
            : `Invalid HTTP Response: ${input.statusCode}`,
      status_code: input.statusCode,
      event: input.event,
      action,
      installation_id: null,
      repository_id: 42,
    }
    deliveries.unshift(delivery)
    deliveries.sort((a, b) => Date.parse(b.delivered_at) - Date.parse(a.delivered_at) || b.id - a.id)
    payloads.set(delivery.id, { event: input.event, body: input.body })
    return delivery
  }

  const redeliver = async (original: MockDelivery) => {
    const payload = payloads.get(original.id)
    if (payload === undefined) return
    let statusCode = 0
    if (!unreachableFor.has(original.guid)) {
      try {
        const answer = await fetch(mock.receiverUrl, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'user-agent': 'GitHub-Hookshot/mock',
            'x-github-delivery': original.guid,
            'x-github-event': payload.event,
            'x-github-hook-id': String(options.hookId),
            'x-hub-signature-256': await sign(options.secret, payload.body),
          },
          body: payload.body,
        })
        statusCode = answer.status
        await answer.body?.cancel()
      } catch {
        statusCode = 0
      }
    }
    record({
      guid: original.guid,
      event: payload.event,
      body: payload.body,
      deliveredAt: new Date(),
      statusCode,
      redelivery: true,
    })
  }

  const answer = (
    response: ServerResponse,
    status: number,
    body: unknown,
    headers: Record<string, string> = {},
  ) => {
    response.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'x-github-api-version-selected': '2022-11-28',
      'x-ratelimit-limit': String(rateLimit.limit),
      'x-ratelimit-remaining': String(rateLimit.remaining),
      'x-ratelimit-reset': String(rateLimit.resetAt),
      'x-ratelimit-used': String(rateLimit.limit - rateLimit.remaining),
      'x-ratelimit-resource': 'core',
      ...headers,
    })
    response.end(JSON.stringify(body))
  }

  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://mock')
    requests.push({
      method: request.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      headers: request.headers,
    })
    request.resume()
    const auth = request.headers.authorization
    if (auth !== `Bearer ${options.token}` && auth !== `token ${options.token}`) {
      return answer(response, 401, {
        message: 'Bad credentials',
        documentation_url: 'https://docs.github.com/rest',
        status: '401',
      })
    }
    if (Date.now() / 1000 >= rateLimit.resetAt) {
      rateLimit.remaining = rateLimit.limit
      rateLimit.resetAt = Math.floor(Date.now() / 1000) + 3600
    }
    if (rateLimit.remaining <= 0) {
      mock.refusals++
      return answer(response, 403, {
        message: 'API rate limit exceeded for user ID 1.',
        documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api',
        status: '403',
      })
    }
    rateLimit.remaining--
    if (request.method === 'GET' && url.pathname === hookPath) {
      const perPage = Math.min(100, Math.max(1, Number(url.searchParams.get('per_page') ?? '30') || 30))
      const cursor = url.searchParams.get('cursor')
      let start = 0
      if (cursor !== null) {
        const match = /^v1_(\d+)$/.exec(cursor)
        if (match === null) return answer(response, 400, { message: 'Invalid cursor', status: '400' })
        // The page starts at the delivery the cursor names, wherever newer deliveries put it since.
        start = deliveries.findIndex((delivery) => delivery.id === Number(match[1]))
        if (start === -1)
          return answer(response, 422, { message: 'Validation Failed: cursor', status: '422' })
      }
      const page = deliveries.slice(start, start + perPage)
      const next = deliveries[start + perPage]
      const headers: Record<string, string> =
        next === undefined
          ? {}
          : {
              link: `<http://mock/repositories/42/hooks/${options.hookId}/deliveries?per_page=${perPage}&cursor=v1_${next.id}>; rel="next"`,
            }
      return answer(response, 200, page, headers)
    }
    const attempt = new RegExp(`^${hookPath}/(\\d+)/attempts$`).exec(url.pathname)
    if (request.method === 'POST' && attempt !== null) {
      const original = deliveries.find((delivery) => delivery.id === Number(attempt[1]))
      if (original === undefined) return answer(response, 404, { message: 'Not Found', status: '404' })
      redeliveryRequests.push(original.id)
      answer(response, 202, {})
      const sent = redeliver(original).finally(() => pending.delete(sent))
      pending.add(sent)
      return
    }
    return answer(response, 404, {
      message: 'Not Found',
      documentation_url: 'https://docs.github.com/rest',
      status: '404',
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const mock: MockGithub = {
    baseUrl: `http://127.0.0.1:${port}`,
    refusals: 0,
    receiverUrl: '',
    deliveries,
    redeliveryRequests,
    requests,
    rateLimit,
    unreachableFor,
    addDelivery: (input) => record({ ...input, redelivery: false }),
    async settled() {
      await Promise.all([...pending])
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
  return mock
}
