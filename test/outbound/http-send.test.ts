import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connectionPool, sendHttp } from '../../src/outbound/http-send.js'

// The one HTTP sender of forwards, HTTP tools and alert channels, against a local server whose every
// path answers in its own way.

interface Received {
  method: string
  url: string
  headers: IncomingMessage['headers']
  body: string
  connection: number
}

let server: Server
let base: string
const received: Received[] = []
const connections = new WeakMap<object, number>()
let opened = 0

const routes: Record<string, (request: IncomingMessage, response: ServerResponse) => void> = {
  '/echo': (_, response) => {
    response.writeHead(429, { 'retry-after': '7', 'content-type': 'text/plain' }).end('slow down')
  },
  '/large': (_, response) => {
    response.writeHead(200).end('x'.repeat(100 * 1024))
  },
  '/redirect': (_, response) => {
    response.writeHead(302, { location: '/echo' }).end()
  },
  '/silent': () => {
    // never answers
  },
  '/cut': (_, response) => {
    response.writeHead(200, { 'content-length': '100' })
    response.write('partial')
    setTimeout(() => response.socket?.destroy(), 20)
  },
}

beforeAll(async () => {
  server = createServer((request, response) => {
    let connection = connections.get(request.socket)
    if (connection === undefined) {
      opened += 1
      connection = opened
      connections.set(request.socket, connection)
    }
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const path = (request.url ?? '').split('?')[0] ?? ''
      received.push({
        method: request.method ?? '',
        url: request.url ?? '',
        headers: request.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        connection,
      })
      ;(routes[path] ?? routes['/echo'])?.(request, response)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise((resolve) => server.close(resolve))
})

const send = (url: string, options: Partial<Parameters<typeof sendHttp>[1]> = {}) =>
  sendHttp(new URL(url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('{"a":1}'),
    timeoutMs: 2000,
    signals: [],
    guarded: false,
    ...options,
  })

describe('sendHttp', () => {
  it('sends the method, headers, path, query and body, and answers with status, headers and body', async () => {
    const sent = await send(`${base}/echo?x=1#fragment`, { headers: { 'x-custom': 'yes' } })
    expect(sent).toMatchObject({
      kind: 'answered',
      answer: { status: 429, headers: { 'retry-after': '7' } },
    })
    expect(sent.kind === 'answered' && sent.answer.body.toString()).toBe('slow down')
    const request = received.at(-1)
    expect(request).toMatchObject({ method: 'POST', url: '/echo?x=1', body: '{"a":1}' })
    expect(request?.headers).toMatchObject({ 'x-custom': 'yes', 'content-length': '7' })
  })

  it("keeps the answer's first 64 KiB", async () => {
    const sent = await send(`${base}/large`)
    expect(sent.kind === 'answered' && sent.answer.body.length).toBe(64 * 1024)
  })

  it('never follows a redirect', async () => {
    const before = received.length
    const sent = await send(`${base}/redirect`)
    expect(sent).toMatchObject({ kind: 'answered', answer: { status: 302 } })
    expect(received.length).toBe(before + 1)
  })

  it("sends a URL's user and password as Basic authorization, unless an Authorization header is given", async () => {
    const withCredentials = base.replace('http://', 'http://hook%20user:s%3Acret@')
    await send(`${withCredentials}/echo`)
    expect(received.at(-1)?.headers.authorization).toBe(
      `Basic ${Buffer.from('hook user:s:cret').toString('base64')}`,
    )
    await send(`${withCredentials}/echo`, { headers: { Authorization: 'Bearer mine' } })
    expect(received.at(-1)?.headers.authorization).toBe('Bearer mine')
  })

  it('an answer cut off after its status line is still the answer', async () => {
    const sent = await send(`${base}/cut`)
    expect(sent).toMatchObject({ kind: 'answered', answer: { status: 200 } })
    expect(sent.kind === 'answered' && sent.answer.body.toString()).toBe('partial')
  })

  it('no answer within the time: no_answer, at the time', async () => {
    const startedAt = Date.now()
    const sent = await send(`${base}/silent`, { timeoutMs: 300 })
    expect(sent).toEqual({ kind: 'no_answer', error: 'timed out' })
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(290)
    expect(Date.now() - startedAt).toBeLessThan(2000)
  })

  it('stops when any of its signals aborts, also one aborted before the send', async () => {
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 100)
    const startedAt = Date.now()
    const sent = await send(`${base}/silent`, { signals: [new AbortController().signal, controller.signal] })
    expect(sent).toEqual({ kind: 'no_answer', error: 'timed out' })
    expect(Date.now() - startedAt).toBeLessThan(1500)
    const before = received.length
    expect(await send(`${base}/echo`, { signals: [AbortSignal.abort()] })).toEqual({
      kind: 'no_answer',
      error: 'timed out',
    })
    await new Promise((wake) => setTimeout(wake, 100)) // what was written would have arrived by now
    expect(received.length).toBe(before)
  })

  it('stops on time while it still waits for a connection, and is never sent afterwards', async () => {
    // One connection, held by a request that gets no answer: the next one waits in the pool's queue.
    const pool = new Pool(base, { connections: 1 })
    try {
      const before = received.length
      const holding = send(`${base}/silent`, { connections: pool, timeoutMs: 1000 })
      await new Promise((wake) => setTimeout(wake, 50))
      const startedAt = Date.now()
      const queued = await send(`${base}/echo`, { connections: pool, timeoutMs: 200 })
      expect(queued).toEqual({ kind: 'no_answer', error: 'timed out' })
      expect(Date.now() - startedAt).toBeLessThan(800)
      expect(await holding).toEqual({ kind: 'no_answer', error: 'timed out' })
      // The first request's connection is gone; the queued one would now get a new one.
      await new Promise((wake) => setTimeout(wake, 200))
      expect(received.slice(before).map((request) => request.url)).toEqual(['/silent'])
    } finally {
      await pool.close()
    }
  })

  it('a refused connection is no_answer with its code', async () => {
    const closed = createServer()
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const port = (closed.address() as AddressInfo).port
    await new Promise((resolve) => closed.close(resolve))
    const sent = await send(`http://127.0.0.1:${port}/echo`)
    expect(sent.kind).toBe('no_answer')
    expect(sent.kind === 'no_answer' && sent.error).toContain('ECONNREFUSED')
  })

  it('guarded: a name that resolves to a non-public address is refused before anything is sent', async () => {
    const before = received.length
    const sent = await send(base.replace('127.0.0.1', 'localhost'), { guarded: true })
    expect(sent.kind).toBe('not_sent')
    expect(received.length).toBe(before)
  })

  it('a request HTTP cannot carry is not sent', async () => {
    const before = received.length
    const sent = await send(`${base}/echo`, { headers: { 'transfer-encoding': 'chunked, gzip' } })
    expect(sent.kind).toBe('not_sent')
    expect(received.length).toBe(before)
  })

  it("a destination's connection pool keeps its connections alive between requests", async () => {
    const pool = connectionPool(base)
    try {
      for (let i = 0; i < 6; i++) await send(`${base}/echo`, { connections: pool })
      // undici may open a second connection while the first is finishing its answer, never more.
      const used = new Set(received.slice(-6).map((request) => request.connection))
      expect(used.size).toBeLessThanOrEqual(2)
    } finally {
      await pool.close()
    }
  })
})
