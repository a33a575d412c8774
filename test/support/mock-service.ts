import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A third party as a real HTTP server: payments, inventory and confirmations, like the source
 * document's worked sequence. `honorKeys` makes it store each Idempotency-Key with its response and
 * replay it, as Stripe does; without it every request is a new effect. `loseResponse` commits the
 * effect and then drops the connection: the lost response the ledger must survive.
 */
export interface MockService {
  url: string
  charges: Array<{ id: string; amount: number; reference: string | undefined; key: string | undefined }>
  reservations: Array<{ id: string; key: string; sku: string; released: boolean }>
  confirmations: Array<{ id: string; key: string | undefined; orderId: string }>
  releases: string[]
  requests: Array<{ method: string; path: string; key: string | undefined }>
  /** The next `times` requests to `path` take effect, then lose their response. */
  loseResponse(path: string, times?: number): void
  /** The next `times` requests to `path` answer `status` without any effect. */
  failWith(path: string, status: number, times?: number): void
  close(): Promise<void>
}

export async function startMockService(options: { honorKeys: boolean }): Promise<MockService> {
  const stored = new Map<string, { status: number; body: unknown }>()
  const lose = new Map<string, number>()
  const fail = new Map<string, { status: number; times: number }>()
  let counter = 0
  const service: Omit<MockService, 'url' | 'close' | 'loseResponse' | 'failWith'> = {
    charges: [],
    reservations: [],
    confirmations: [],
    releases: [],
    requests: [],
  }

  const effect = (
    path: string,
    key: string | undefined,
    body: Record<string, unknown>,
  ): { status: number; body: unknown } => {
    counter += 1
    switch (path) {
      case '/charges': {
        if (body.card === 'declined') return { status: 402, body: { error: 'card_declined' } }
        const charge = {
          id: `ch_${counter}`,
          amount: Number(body.amount),
          reference: body.reference as string | undefined,
          key,
        }
        service.charges.push(charge)
        return { status: 200, body: charge }
      }
      case '/reservations': {
        const reservation = { id: `res_${counter}`, key: key ?? '', sku: String(body.sku), released: false }
        service.reservations.push(reservation)
        return { status: 200, body: reservation }
      }
      case '/reservations/release': {
        // Releasing a reservation that never existed succeeds: the undo is safe after a lost response.
        service.releases.push(String(body.key))
        for (const r of service.reservations) if (r.key === body.key) r.released = true
        return { status: 200, body: { released: body.key } }
      }
      case '/confirmations': {
        const confirmation = { id: `conf_${counter}`, key, orderId: String(body.orderId) }
        service.confirmations.push(confirmation)
        return { status: 200, body: confirmation }
      }
      default:
        return { status: 404, body: { error: 'not_found' } }
    }
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const url = new URL(req.url ?? '/', 'http://mock')
    const key = req.headers['idempotency-key'] as string | undefined
    service.requests.push({ method: req.method ?? 'GET', path: url.pathname, key })
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify(body))
    }
    if (req.method === 'GET' && url.pathname === '/charges') {
      const reference = url.searchParams.get('reference')
      send(200, { data: service.charges.filter((c) => c.reference === reference) })
      return
    }
    const failing = fail.get(url.pathname)
    if (failing !== undefined && failing.times > 0) {
      failing.times -= 1
      send(failing.status, { error: 'injected' })
      return
    }
    let answer: { status: number; body: unknown }
    const storedKey = key === undefined ? undefined : `${url.pathname} ${key}`
    const replay = options.honorKeys && storedKey !== undefined ? stored.get(storedKey) : undefined
    if (replay !== undefined) {
      answer = replay
    } else {
      const body =
        chunks.length === 0
          ? {}
          : (JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>)
      answer = effect(url.pathname, key, body)
      if (options.honorKeys && storedKey !== undefined) stored.set(storedKey, answer)
    }
    const losing = lose.get(url.pathname) ?? 0
    if (losing > 0) {
      lose.set(url.pathname, losing - 1)
      req.socket.destroy()
      return
    }
    send(answer.status, answer.body)
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      res.writeHead(500)
      res.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    ...service,
    url: `http://127.0.0.1:${port}`,
    loseResponse(path, times = 1) {
      lose.set(path, times)
    },
    failWith(path, status, times = 1) {
      fail.set(path, { status, times })
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

export { postJson } from './post-json.mjs'
