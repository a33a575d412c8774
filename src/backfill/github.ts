import { eventsInLedger, recordRedelivery, redeliveriesRequested } from '../db/backfill-cursors.js'
import { BackfillError } from './errors.js'
import { stuckGuard } from './stuck-guard.js'
import type { ProviderBackfill, SweepContext } from './sweep.js'

interface Delivery {
  id: number
  guid: string
  deliveredAt: Date
  succeeded: boolean
  event: string | null
}

/**
 * GitHub never redelivers by itself. This lists the hook's deliveries ("List deliveries for a
 * repository webhook", newest first, `per_page`, paged by the `cursor` its Link header names) down
 * to `since`, and for each delivery that failed and was never delivered since, asks GitHub to
 * redeliver it ("Redeliver a delivery for a repository webhook"): the redelivery arrives at
 * /webhooks/<source> signed as usual and is claimed like any delivery. A delivery is asked for once
 * (backfill_redeliveries); one whose event the ledger holds anyway is not asked for at all.
 * Returns whether the sweep reached its lower bound.
 */
async function githubSweep(context: SweepContext): Promise<boolean> {
  const { config, report } = context
  const hook = `/repos/${config.repository ?? ''}/hooks/${config.hookId ?? 0}`
  // Newest first: a redelivery that succeeded is listed before the failure it repaired.
  const delivered = new Set<string>()
  let cursor = context.resume
  const guard = stuckGuard('GitHub', context.resume)
  for (let page = 0; page < config.maxPagesPerPass && !context.stopping(); page++) {
    const query = new URLSearchParams({ per_page: String(config.pageSize) })
    if (cursor !== null) query.set('cursor', cursor)
    const answer = await context.client.request('GET', `${hook}/deliveries?${query}`)
    const listed = readDeliveries(answer.body)
    const inWindow = listed.filter((delivery) => delivery.deliveredAt.getTime() >= context.since.getTime())
    const next = nextCursor(answer.headers.get('link'))
    const finalPage = inWindow.length < listed.length || next === null
    guard.page(
      listed.map((delivery) => String(delivery.id)),
      finalPage ? null : next,
    )
    report.pages++
    report.listed += inWindow.length
    for (const delivery of inWindow) if (delivery.succeeded) delivered.add(delivery.guid)

    // The newest failed attempt of each guid never delivered since.
    const failed = new Map<string, Delivery>()
    for (const delivery of inWindow) {
      if (!delivery.succeeded && !delivered.has(delivery.guid) && !failed.has(delivery.guid)) {
        failed.set(delivery.guid, delivery)
      }
    }
    const guids = [...failed.keys()]
    const held = await eventsInLedger(context.sql, context.source, guids)
    const asked = await redeliveriesRequested(context.sql, context.source, guids)
    for (const [guid, delivery] of failed) {
      if (held.has(guid)) {
        report.alreadyInLedger++
      } else if (asked.has(guid)) {
        report.alreadyRequested++
      } else {
        // Recorded once GitHub accepted the request: a pass that dies in between asks again next
        // time, and the second redelivery is a duplicate the ledger answers as such.
        await context.client.request('POST', `${hook}/deliveries/${delivery.id}/attempts`)
        await recordRedelivery(context.sql, context.source, {
          guid,
          deliveryId: String(delivery.id),
          event: delivery.event,
        })
        report.redelivered.push(guid)
      }
    }

    if (finalPage || next === null) return true
    cursor = next
    await context.pageDone(cursor)
  }
  return false
}

export const githubBackfill: ProviderBackfill = {
  api: {
    name: 'GitHub',
    headers: { accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28' },
    // GitHub's docs: a secondary rate limit with no retry-after is waited out for at least a minute.
    defaultRateLimitWaitMs: 60_000,
  },
  sweep: githubSweep,
}

/** The documented array of delivery summaries, each checked for the fields used here. */
function readDeliveries(body: unknown): Delivery[] {
  if (!Array.isArray(body)) {
    throw new BackfillError(
      'invalid_response',
      'GitHub answered the deliveries list with something other than an array',
    )
  }
  return body.map((item: unknown, index): Delivery => {
    const delivery = typeof item === 'object' && item !== null ? (item as Record<string, unknown>) : {}
    const deliveredAt =
      typeof delivery.delivered_at === 'string' ? new Date(delivery.delivered_at) : undefined
    if (
      typeof delivery.id !== 'number' ||
      typeof delivery.guid !== 'string' ||
      !/^[\x21-\x7e]{1,255}$/.test(delivery.guid) ||
      deliveredAt === undefined ||
      Number.isNaN(deliveredAt.getTime())
    ) {
      throw new BackfillError(
        'invalid_response',
        `GitHub's deliveries list has an item at [${index}] without a numeric id, a guid or a delivered_at time`,
      )
    }
    const statusCode = typeof delivery.status_code === 'number' ? delivery.status_code : 0
    return {
      id: delivery.id,
      guid: delivery.guid,
      deliveredAt,
      // GitHub's docs: "a failed delivery will have a status value that is not OK".
      succeeded: delivery.status === 'OK' || (statusCode >= 200 && statusCode < 300),
      event: typeof delivery.event === 'string' ? delivery.event : null,
    }
  })
}

/** The `cursor` of the Link header's rel="next" URL, or null on the last page. */
export function nextCursor(link: string | null): string | null {
  if (link === null) return null
  for (const part of link.split(',')) {
    const match = /<([^>]*)>\s*;\s*rel="?next"?/.exec(part.trim())
    if (match?.[1] === undefined) continue
    try {
      return new URL(match[1]).searchParams.get('cursor')
    } catch {
      return null
    }
  }
  return null
}
