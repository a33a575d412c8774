// The bench's local forward destination: answers 200 at once and notes when each event first arrived
// (by its X-Hookledger-Event-Id), so a run can tell when a backlog is through and whether any event
// was delivered twice.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Destination {
  url: string
  /** Forgets what arrived so far. */
  reset(): void
  delivered(): number
  /** Deliveries of an event that had already arrived. */
  repeats(): number
  /** Resolves once `count` distinct events arrived since the last reset; rejects when the time is up. */
  waitFor(count: number, timeoutMs: number): Promise<{ firstAt: number; lastAt: number }>
  close(): Promise<void>
}

export async function startDestination(): Promise<Destination> {
  const seen = new Set<string>()
  let repeats = 0
  let firstAt = 0
  let lastAt = 0
  const server: Server = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      const id = String(request.headers['x-hookledger-event-id'] ?? '')
      if (seen.has(id)) repeats += 1
      else {
        seen.add(id)
        lastAt = Date.now()
        if (seen.size === 1) firstAt = lastAt
      }
      response.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
    })
  })
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    reset() {
      seen.clear()
      repeats = 0
      firstAt = 0
      lastAt = 0
    },
    delivered: () => seen.size,
    repeats: () => repeats,
    async waitFor(count, timeoutMs) {
      const deadline = Date.now() + timeoutMs
      while (seen.size < count) {
        if (Date.now() > deadline)
          throw new Error(`only ${seen.size} of ${count} events arrived within ${timeoutMs} ms`)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      return { firstAt, lastAt }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
