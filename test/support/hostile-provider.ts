import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

// A provider API that misbehaves the way a test scripts it (a huge page, a body that trickles, a list
// that never ends), on 127.0.0.1. Each request is recorded with when it came and when its connection
// went, so a test can tell who gave up, and when.

export interface HostileRequest {
  path: string
  query: URLSearchParams
  startedAt: number
  /** When the response ended or its connection closed; undefined while it is open. */
  closedAt?: number
  /** Body bytes written to it. */
  bytesSent: number
}

export type HostileHandler = (
  request: IncomingMessage,
  response: ServerResponse,
  record: HostileRequest,
) => void | Promise<void>

export interface HostileProvider {
  baseUrl: string
  requests: HostileRequest[]
  handle(handler: HostileHandler): void
  close(): Promise<void>
}

export async function startHostileProvider(): Promise<HostileProvider> {
  const requests: HostileRequest[] = []
  let handler: HostileHandler = (_request, response) => {
    response.writeHead(404).end()
  }
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://provider')
    const record: HostileRequest = {
      path: url.pathname,
      query: url.searchParams,
      startedAt: Date.now(),
      bytesSent: 0,
    }
    requests.push(record)
    response.once('close', () => {
      record.closedAt = Date.now()
    })
    void Promise.resolve(handler(request, response, record)).catch(() => response.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    handle(next) {
      handler = next
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/**
 * Writes `total` bytes of `chunk`s in turn, waiting for the client to take each (so the server
 * holds one chunk, never the whole body), and stops when the client goes away.
 */
export async function streamBody(
  response: ServerResponse,
  record: HostileRequest,
  chunk: Buffer,
  total: number,
): Promise<void> {
  while (record.bytesSent < total && !response.destroyed) {
    const piece = chunk.subarray(0, Math.min(chunk.length, total - record.bytesSent))
    record.bytesSent += piece.length
    if (!response.write(piece)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          response.off('drain', done)
          response.off('close', done)
          resolve()
        }
        response.on('drain', done)
        response.on('close', done)
      })
    }
  }
}
