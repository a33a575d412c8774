// The bench's local forward destination: answers 200 at once and notes when each event first arrived
// (by its X-Hookledger-Event-Id), so a run can tell when a backlog is through and whether any event
// was delivered twice. For the trickle it also reads each body's `sent_at` stamp (bench/signing.ts)
// and keeps how long the event took from its sending to its forward's arrival.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'

export interface Destination {
  url: string
  /** Forgets what arrived so far; with `latencies`, reads the stamps of what arrives from now on. */
  reset(options?: { latencies?: boolean }): void
  delivered(): number
  /** Deliveries of an event that had already arrived. */
  repeats(): number
  /** Sending to first arrival, in ms, one per stamped event (since the last reset with `latencies`). */
  latencies(): number[]
  /** Resolves once `count` distinct events arrived since the last reset; rejects when the time is up. */
  waitFor(count: number, timeoutMs: number): Promise<{ firstAt: number; lastAt: number }>
  close(): Promise<void>
}

const SENT_AT = /"sent_at":([0-9.]+)/

export async function startDestination(): Promise<Destination> {
  const seen = new Set<string>()
  let repeats = 0
  let firstAt = 0
  let lastAt = 0
  let latencies: number[] | undefined
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = []
    if (latencies === undefined) request.resume()
    else request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const arrived = performance.now()
      const id = String(request.headers['x-hookledger-event-id'] ?? '')
      if (seen.has(id)) repeats += 1
      else {
        seen.add(id)
        lastAt = Date.now()
        if (seen.size === 1) firstAt = lastAt
        const stamp = latencies === undefined ? null : SENT_AT.exec(Buffer.concat(chunks).toString('latin1'))
        if (stamp?.[1] !== undefined) latencies?.push(arrived - Number(stamp[1]))
      }
      response.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
    })
  })
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    reset(options = {}) {
      seen.clear()
      repeats = 0
      firstAt = 0
      lastAt = 0
      latencies = options.latencies === true ? [] : undefined
    },
    delivered: () => seen.size,
    repeats: () => repeats,
    latencies: () => latencies ?? [],
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
