import { createHmac } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A payment provider as two real HTTP parts: an API that creates charges (and can lose its answer
 * after committing one, by destroying the socket) and a sender that posts Stripe-signed events
 * (`Stripe-Signature: t=…,v1=HMAC-SHA256(secret, "{t}.{body}")`, signed here by hand, independent
 * of the verifier under test) to a webhook URL. Charges copy the request's `metadata`, as Stripe's do,
 * so the events carry the operation key the call sent.
 */
export interface MockPayments {
  url: string
  charges: Array<{ id: string; amount: number; metadata: Record<string, string>; declined: boolean }>
  /**
   * The next charge request takes effect, then `before` runs (the provider's webhook may go out
   * first), then the connection is destroyed: the lost response.
   */
  loseNextResponse(before?: (charge: MockPayments['charges'][number]) => Promise<void>): void
  /** The next charge is declined (recorded, not charged) and its answer lost. */
  declineNext(): void
  /** Posts the provider's signed event about `charge` to `webhookUrl`; resolves with the HTTP status. */
  sendEvent(
    charge: MockPayments['charges'][number],
    type: string,
  ): Promise<{ status: number; eventId: string }>
  close(): Promise<void>
}

export async function startMockPayments(options: {
  webhookUrl: string
  secret: string
}): Promise<MockPayments> {
  let counter = 0
  let lose: { before: ((charge: MockPayments['charges'][number]) => Promise<void>) | undefined } | undefined
  let decline = false
  const charges: MockPayments['charges'] = []

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    if (req.method !== 'POST' || req.url !== '/v1/charges') {
      res.writeHead(404).end()
      return
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
      amount: number
      metadata?: Record<string, string>
    }
    counter += 1
    const charge = {
      id: `ch_${counter}`,
      amount: body.amount,
      metadata: body.metadata ?? {},
      declined: decline,
    }
    decline = false
    charges.push(charge)
    const losing = lose
    lose = undefined
    if (losing !== undefined) {
      await losing.before?.(charge)
      req.socket.destroy()
      return
    }
    res.writeHead(charge.declined ? 402 : 200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(charge))
  }
  const server = createServer((req, res) => {
    handle(req, res).catch(() => req.socket.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  let events = 0

  return {
    url: `http://127.0.0.1:${port}`,
    charges,
    loseNextResponse(before) {
      lose = { before }
    },
    declineNext() {
      decline = true
    },
    async sendEvent(charge, type) {
      events += 1
      const eventId = `evt_${port}_${events}`
      const created = Math.floor(Date.now() / 1000)
      const body = JSON.stringify({
        id: eventId,
        object: 'event',
        type,
        created,
        data: {
          object: {
            id: charge.id,
            object: 'charge',
            amount: charge.amount,
            status: charge.declined ? 'failed' : 'succeeded',
            failure_code: charge.declined ? 'card_declined' : null,
            metadata: charge.metadata,
          },
        },
      })
      const signature = createHmac('sha256', options.secret).update(`${created}.${body}`).digest('hex')
      const response = await fetch(options.webhookUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'stripe-signature': `t=${created},v1=${signature}` },
        body,
      })
      await response.arrayBuffer()
      return { status: response.status, eventId }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
