import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

// A local Stripe API serving exactly "List all events" as the API reference documents it
// (docs.stripe.com/api/events/list): GET /v1/events, bearer (or basic) auth with the secret key,
// `created[gte|gt|lte|lt]`, `limit` 1–100 (default 10), `starting_after` / `ending_before` cursors,
// `delivery_success`, `types[]`; newest first; `{ object: "list", url, has_more, data }`; errors as
// `{ error: { type, message } }` (401 for a bad key, 400 for a bad parameter, 429 for the rate limit).

export interface MockStripeEvent {
  id: string
  object: 'event'
  type: string
  created: number
  api_version: string
  livemode: boolean
  pending_webhooks: number
  request: { id: string | null; idempotency_key: string | null }
  data: { object: Record<string, unknown> }
}

export interface ScriptedAnswer {
  status: number
  headers?: Record<string, string>
  body?: unknown
}

export interface MockStripeRequest {
  method: string
  path: string
  query: URLSearchParams
  headers: IncomingHttpHeaders
}

export interface MockStripe {
  baseUrl: string
  events: MockStripeEvent[]
  /** Events whose webhooks failed (`delivery_success=false` lists only these). */
  undelivered: Set<string>
  requests: MockStripeRequest[]
  /** Answers given, in order, before the next requests are served normally (429s, 5xx). */
  script: ScriptedAnswer[]
  addEvent(event: Partial<MockStripeEvent> & { id: string; type: string; created: number }): MockStripeEvent
  close(): Promise<void>
}

export async function startMockStripe(apiKey: string): Promise<MockStripe> {
  const events: MockStripeEvent[] = []
  const requests: MockStripeRequest[] = []
  const script: ScriptedAnswer[] = []
  const undelivered = new Set<string>()

  const answer = (
    response: import('node:http').ServerResponse,
    status: number,
    body: unknown,
    headers: Record<string, string> = {},
  ) => {
    response.writeHead(status, { 'content-type': 'application/json', 'request-id': 'req_mock', ...headers })
    response.end(body === undefined ? '' : JSON.stringify(body, null, 2))
  }
  const invalid = (response: import('node:http').ServerResponse, message: string, param?: string) =>
    answer(response, 400, { error: { type: 'invalid_request_error', message, ...(param ? { param } : {}) } })

  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://mock')
    requests.push({
      method: request.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      headers: request.headers,
    })
    const scripted = script.shift()
    if (scripted !== undefined) return answer(response, scripted.status, scripted.body, scripted.headers)
    if (request.method !== 'GET' || url.pathname !== '/v1/events') {
      return answer(response, 404, {
        error: {
          type: 'invalid_request_error',
          message: `Unrecognized request URL (${request.method}: ${url.pathname}).`,
        },
      })
    }
    if (!authorized(request.headers.authorization, apiKey)) {
      return answer(response, 401, {
        error: {
          type: 'invalid_request_error',
          message: `Invalid API Key provided: ${String(request.headers.authorization ?? '').slice(7, 15)}****`,
        },
      })
    }
    const query = url.searchParams
    const limitText = query.get('limit') ?? '10'
    const limit = Number(limitText)
    if (!/^\d+$/.test(limitText) || limit < 1 || limit > 100) {
      return invalid(
        response,
        'This value must be greater than or equal to 1 and less than or equal to 100.',
        'limit',
      )
    }
    const bounds: Array<[string, (created: number, bound: number) => boolean]> = [
      ['created[gte]', (c, b) => c >= b],
      ['created[gt]', (c, b) => c > b],
      ['created[lte]', (c, b) => c <= b],
      ['created[lt]', (c, b) => c < b],
    ]
    let listed = [...events].sort((a, b) => b.created - a.created || events.indexOf(b) - events.indexOf(a))
    for (const [name, test] of bounds) {
      const value = query.get(name)
      if (value === null) continue
      if (!/^\d+$/.test(value)) return invalid(response, `Invalid integer: ${value}`, name)
      listed = listed.filter((event) => test(event.created, Number(value)))
    }
    const deliverySuccess = query.get('delivery_success')
    if (deliverySuccess === 'false') listed = listed.filter((event) => undelivered.has(event.id))
    if (deliverySuccess === 'true') listed = listed.filter((event) => !undelivered.has(event.id))
    const types = query.getAll('types[]')
    if (types.length > 0 && query.has('type'))
      return invalid(response, 'You may pass either type or types, but not both.')
    if (types.length > 20) return invalid(response, 'types may contain at most 20 entries', 'types')
    if (types.length > 0) listed = listed.filter((event) => types.includes(event.type))

    const startingAfter = query.get('starting_after')
    const endingBefore = query.get('ending_before')
    let page: MockStripeEvent[]
    let hasMore: boolean
    if (startingAfter !== null) {
      const at = listed.findIndex((event) => event.id === startingAfter)
      if (at === -1 && !events.some((event) => event.id === startingAfter)) {
        return invalid(response, `No such event: '${startingAfter}'`, 'starting_after')
      }
      const rest = listed.slice(at + 1)
      page = rest.slice(0, limit)
      hasMore = rest.length > limit
    } else if (endingBefore !== null) {
      const at = listed.findIndex((event) => event.id === endingBefore)
      const before = at === -1 ? [] : listed.slice(0, at)
      page = before.slice(Math.max(0, before.length - limit))
      hasMore = before.length > limit
    } else {
      page = listed.slice(0, limit)
      hasMore = listed.length > limit
    }
    return answer(response, 200, { object: 'list', url: '/v1/events', has_more: hasMore, data: page })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    events,
    undelivered,
    requests,
    script,
    addEvent(partial) {
      const event: MockStripeEvent = {
        object: 'event',
        api_version: '2025-04-30.basil',
        livemode: false,
        pending_webhooks: 0,
        request: { id: null, idempotency_key: null },
        data: { object: { id: `pi_${partial.id.slice(4)}`, object: 'payment_intent', amount: 1000 } },
        ...partial,
      }
      events.push(event)
      return event
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** Stripe takes the key as a bearer token or as the basic-auth user name. */
function authorized(header: string | undefined, apiKey: string): boolean {
  if (header === `Bearer ${apiKey}`) return true
  if (header?.startsWith('Basic ') === true) {
    return Buffer.from(header.slice(6), 'base64').toString('utf8').split(':')[0] === apiKey
  }
  return false
}

/** The webhook body Stripe sends for `event`: the same event object, pretty-printed. */
export function stripeWebhookBody(event: MockStripeEvent): string {
  return JSON.stringify(event, null, 2)
}
