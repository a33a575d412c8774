import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Received {
  headers: IncomingHttpHeaders
  body: string
}

export interface SinkAnswer {
  status: number
  body?: string
}

/** A real HTTP destination that records what it is sent and answers as the test says. */
export async function startSink(
  /** May answer later (a slow destination): `received` has the request as soon as it arrived. */
  answer: (request: Received, index: number) => SinkAnswer | Promise<SinkAnswer>,
) {
  const received: Received[] = []
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', async () => {
      const entry = { headers: request.headers, body: Buffer.concat(chunks).toString('utf8') }
      received.push(entry)
      const { status, body } = await answer(entry, received.length - 1)
      response.writeHead(status, { 'content-type': 'text/plain' }).end(body ?? '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}
