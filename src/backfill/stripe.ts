import { createHash } from 'node:crypto'
import { claimEvents, type NewEvent } from '../db/claims.js'
import { storableText } from '../db/text.js'
import { readEventId } from '../inbound/verifiers/body.js'
import { BackfillError } from './errors.js'
import { stuckGuard } from './stuck-guard.js'
import type { ProviderBackfill, SweepContext } from './sweep.js'

/**
 * The headers a backfilled row carries: it has no provider signature, and a forward passes these on,
 * so the destination can tell it from a signed delivery.
 */
export const BACKFILL_HEADERS = { 'content-type': 'application/json', 'x-hookledger-origin': 'backfill' }

interface ListedEvent {
  id: string
  type: string | null
  /** The event object exactly as the list carried it, re-serialized: the row's body. */
  body: Buffer
  /** The same object parsed, for its ordering keys. */
  event: Record<string, unknown>
}

/**
 * Stripe's "List all events" (`GET /v1/events`), newest first, from `created[gte]` = since, paged
 * with `starting_after` while `has_more`. Each page's events are claimed in one statement through
 * the webhook path's claim, so a webhook and the list meet on (source, event id): whichever comes
 * first is the row, the other a duplicate. Returns whether the sweep reached its lower bound.
 */
async function stripeSweep(context: SweepContext): Promise<boolean> {
  const { config, report } = context
  let startingAfter = context.resume
  const guard = stuckGuard('Stripe', context.resume)
  for (let page = 0; page < config.maxPagesPerPass && !context.stopping(); page++) {
    const query = new URLSearchParams({
      'created[gte]': String(Math.floor(context.since.getTime() / 1000)),
      limit: String(config.pageSize),
    })
    if (startingAfter !== null) query.set('starting_after', startingAfter)
    if (config.onlyFailedDeliveries !== false) query.set('delivery_success', 'false')
    for (const type of config.eventTypes ?? []) query.append('types[]', type)
    const answer = await context.client.request('GET', `/v1/events?${query}`)
    const { events, hasMore } = readEventList(answer.body)
    const last = events.at(-1)
    guard.page(
      events.map((event) => event.id),
      hasMore && last !== undefined ? last.id : null,
    )
    report.pages++
    report.listed += events.length
    const results = await claimEvents(
      context.sql,
      events.map((event): NewEvent => {
        const payloadHash = createHash('sha256').update(event.body).digest('hex')
        return {
          source: context.source,
          eventId: event.id,
          eventType: event.type === null ? null : storableText(event.type),
          payloadHash,
          body: event.body,
          headers: BACKFILL_HEADERS,
          origin: 'backfill',
          orderingKeys: context.orderingKeys(event.event),
        }
      }),
    )
    for (const [index, result] of results.entries()) {
      const eventId = events[index]?.id ?? ''
      if (result.kind === 'accepted') {
        report.claimed.push(eventId)
        context.onAccepted(result.id)
      } else if (result.kind === 'conflict') {
        report.conflicts.push(eventId)
      } else {
        report.duplicates++
      }
    }
    if (!hasMore || last === undefined) return true
    startingAfter = last.id
    await context.pageDone(startingAfter)
  }
  return false
}

export const stripeBackfill: ProviderBackfill = {
  api: {
    name: 'Stripe',
    headers: {},
    // Stripe names no wait on a 429; its docs advise an exponential backoff, started here.
    defaultRateLimitWaitMs: 1000,
  },
  sweep: stripeSweep,
}

/** The documented list object: `{ object: "list", data: [event…], has_more }`, each event checked. */
function readEventList(body: unknown): { events: ListedEvent[]; hasMore: boolean } {
  const list = asRecord(body)
  if (
    list === undefined ||
    list.object !== 'list' ||
    !Array.isArray(list.data) ||
    typeof list.has_more !== 'boolean'
  ) {
    throw new BackfillError(
      'invalid_response',
      'Stripe answered GET /v1/events with something other than a list object ({object: "list", data, has_more})',
    )
  }
  const events = list.data.map((item: unknown, index: number): ListedEvent => {
    const event = asRecord(item)
    const id = readEventId(typeof event?.id === 'string' ? event.id : undefined, `data[${index}].id`)
    if (event === undefined || event.object !== 'event' || typeof id !== 'string') {
      throw new BackfillError(
        'invalid_response',
        `Stripe's event list has an item at data[${index}] that is not an event with a valid id`,
      )
    }
    return {
      id,
      type: typeof event.type === 'string' ? event.type : null,
      body: Buffer.from(JSON.stringify(event)),
      event,
    }
  })
  return { events, hasMore: list.has_more }
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined
}
