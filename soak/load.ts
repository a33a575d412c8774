// The soak's steady, bounded load: signed Standard Webhooks deliveries at a fixed rate, each one
// re-sent (same id, same body, freshly signed, as a provider retries) while it is not answered 200,
// a bounded number of times. Replays and duplicates re-send deliveries already answered 200.
import { createHmac, randomBytes } from 'node:crypto'

const SECRET = randomBytes(32)
export const SOAK_SECRET = `whsec_${SECRET.toString('base64')}`
const PAD = 'x'.repeat(600)
const REQUEST_TIMEOUT_MS = 20_000
// A provider's retries: after 1, 2, 4, 8, 8, … s; 12 tries cover the longest fault many times over.
const MAX_TRIES = 12

export interface LoadStats {
  /** Answer per request: `accepted`, `duplicate`, `503`, `429`, `network`, other statuses. */
  outcomes: Map<string, number>
  /** Ids answered 200 (accepted or duplicate) at least once. */
  answered200: Set<string>
  /** Ids that got no 200 within their tries. */
  gaveUp: Set<string>
  /** Sends skipped because too many requests were in flight (the load is bounded, not queued). */
  skipped: number
  sent: number
}

interface Delivery {
  id: string
  body: string
}

export interface Load {
  stats: LoadStats
  /** Re-sends `count` deliveries answered 200 before; `concurrent` sends each twice at once. */
  resend(count: number, concurrent: boolean): Promise<number>
  /** Stops new deliveries and waits (bounded) for every retry in flight. */
  stop(timeoutMs: number): Promise<void>
}

export function startLoad(url: string, perSecond: number, maxInFlight: number): Load {
  const stats: LoadStats = {
    // The answers the report always lists, seen or not; others are added as they come.
    outcomes: new Map(['accepted', 'duplicate', '503', '429'].map((outcome) => [outcome, 0])),
    answered200: new Set(),
    gaveUp: new Set(),
    skipped: 0,
    sent: 0,
  }
  const accepted: Delivery[] = []
  const pending = new Set<Promise<void>>()
  let inFlight = 0
  let sequence = 0
  let stopping = false
  const count = (outcome: string) => stats.outcomes.set(outcome, (stats.outcomes.get(outcome) ?? 0) + 1)

  const sendOnce = async (delivery: Delivery): Promise<boolean> => {
    const timestamp = Math.floor(Date.now() / 1000)
    const signature = createHmac('sha256', SECRET)
      .update(`${delivery.id}.${timestamp}.${delivery.body}`)
      .digest('base64')
    inFlight += 1
    stats.sent += 1
    try {
      const response = await fetch(url, {
        method: 'POST',
        body: delivery.body,
        headers: {
          'content-type': 'application/json',
          'webhook-id': delivery.id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': `v1,${signature}`,
        },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      })
      const text = await response.text()
      if (response.status === 200) {
        const status = (JSON.parse(text) as { status?: string }).status ?? 'ok'
        count(status)
        if (!stats.answered200.has(delivery.id)) accepted.push(delivery)
        stats.answered200.add(delivery.id)
        return true
      }
      count(String(response.status))
      return false
    } catch {
      count('network')
      return false
    } finally {
      inFlight -= 1
    }
  }

  const deliver = async (delivery: Delivery) => {
    for (let attempt = 0; attempt < MAX_TRIES; attempt += 1) {
      if (await sendOnce(delivery)) return
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000 * 2 ** attempt, 8000)))
    }
    stats.gaveUp.add(delivery.id)
  }
  const track = (work: Promise<void>) => {
    pending.add(work)
    void work.finally(() => pending.delete(work))
  }

  const TICK_MS = 100
  const perTick = Math.max(1, Math.round((perSecond * TICK_MS) / 1000))
  const ticker = setInterval(() => {
    if (stopping) return
    for (let i = 0; i < perTick; i += 1) {
      if (inFlight >= maxInFlight) {
        stats.skipped += 1
        continue
      }
      sequence += 1
      const id = `msg_soak_${process.pid}_${sequence}`
      const body = JSON.stringify({ type: 'invoice.paid', data: { id: `in_${sequence}`, pad: PAD } })
      track(deliver({ id, body }))
    }
  }, TICK_MS)

  return {
    stats,
    async resend(howMany, concurrent) {
      const picked: Delivery[] = []
      for (let i = 0; i < howMany && accepted.length > 0; i += 1) {
        const delivery = accepted[Math.floor(Math.random() * accepted.length)]
        if (delivery !== undefined) picked.push(delivery)
      }
      await Promise.all(
        picked.map((delivery) =>
          concurrent ? Promise.all([deliver(delivery), deliver(delivery)]) : deliver(delivery),
        ),
      )
      return picked.length * (concurrent ? 2 : 1)
    },
    async stop(timeoutMs) {
      stopping = true
      clearInterval(ticker)
      const deadline = Date.now() + timeoutMs
      while (pending.size > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 200))
      }
    },
  }
}
