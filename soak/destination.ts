// The soak's own forward destination. It answers as the fault scheduler says (200, 500 for a while,
// 410 Gone, slowly) and notes every request it answered 200, by the delivery's webhook-id, with the
// Idempotency-Key it carried: the end checks read those notes.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export type DestinationMode = 'ok' | 'fail500' | 'gone410' | 'slow'

export interface SoakDestination {
  url: string
  setMode(mode: DestinationMode): void
  /** webhook-id → how many times it was taken (answered 200). */
  taken: Map<string, number>
  /** webhook-id → every Idempotency-Key it arrived with (taken or not). */
  keys: Map<string, Set<string>>
  /** Requests answered with each status. */
  answers: Map<number, number>
  /** When the last delivery was taken (ms since epoch). */
  lastTakenAt(): number
  close(): Promise<void>
}

const SLOW_MS = 3000

export async function startSoakDestination(): Promise<SoakDestination> {
  let mode: DestinationMode = 'ok'
  let lastAt = 0
  const taken = new Map<string, number>()
  const keys = new Map<string, Set<string>>()
  const answers = new Map<number, number>()
  const answer = (status: number, id: string, respond: () => void) => {
    answers.set(status, (answers.get(status) ?? 0) + 1)
    if (status === 200) {
      taken.set(id, (taken.get(id) ?? 0) + 1)
      lastAt = Date.now()
    }
    respond()
  }
  const server: Server = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      const id = String(request.headers['webhook-id'] ?? '')
      const key = String(request.headers['idempotency-key'] ?? '')
      const seen = keys.get(id) ?? new Set<string>()
      seen.add(key)
      keys.set(id, seen)
      // Read once per request: a mode change mid-way applies to the next one.
      const now = mode
      if (now === 'fail500') answer(500, id, () => response.writeHead(500).end('soak: failing'))
      else if (now === 'gone410') answer(410, id, () => response.writeHead(410).end('soak: gone'))
      else if (now === 'slow') {
        setTimeout(() => answer(200, id, () => response.writeHead(200).end('ok')), SLOW_MS)
      } else answer(200, id, () => response.writeHead(200).end('ok'))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    setMode(next) {
      mode = next
    },
    taken,
    keys,
    answers,
    lastTakenAt: () => lastAt,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
