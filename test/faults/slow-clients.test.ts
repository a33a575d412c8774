import { Agent, request } from 'node:http'
import { connect, type Socket } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestService, type TestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { testConfig } from '../support/stack.js'

/**
 * Clients that send too much or too slowly: a body over the limit is refused without breaking the
 * client's next request, and a body dripped byte by byte is cut off at the request timeout.
 */
const AGENT_TOKEN = 'agent-token-for-fault-tests'
let running: TestService
let origin: URL

beforeAll(async () => {
  running = await startTestService({
    inProcessQueue: true,
    env: { AGENT_TOKEN },
    config: testConfig(
      {
        server: {
          operationsBodyLimitBytes: 64 * 1024,
          headersTimeoutMs: 500,
          requestTimeoutMs: 1000,
        },
      },
      { bodyLimitBytes: 4096 },
    ),
  })
  origin = new URL(running.url)
})
afterAll(async () => {
  await running.close()
})

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

/** One request through `agent`, so tests can see whether a kept-alive socket survives the answer. */
function send(
  agent: Agent,
  options: { method: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const outgoing = request(
      { agent, host: origin.hostname, port: origin.port, method: options.method, path: options.path },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        )
        response.on('error', reject)
      },
    )
    for (const [name, value] of Object.entries(options.headers ?? {})) outgoing.setHeader(name, value)
    outgoing.on('error', reject)
    outgoing.end(options.body)
  })
}

function claimBody(args: unknown): string {
  return JSON.stringify({
    key: `slow-clients:${Math.random()}`,
    tool: 'demo.tool',
    effect: 'idempotent',
    args,
  })
}

const bearer = { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' }

describe('bodies over the limit', () => {
  it('/v1/operations refuses a body over server.operationsBodyLimitBytes with 413 payload_too_large', async () => {
    const agent = new Agent({ keepAlive: false })
    const large = await send(agent, {
      method: 'POST',
      path: '/v1/operations/claim',
      headers: bearer,
      body: claimBody({ blob: 'x'.repeat(128 * 1024) }),
    })
    expect(large.status).toBe(413)
    expect(JSON.parse(large.body)).toMatchObject({ error: { code: 'payload_too_large' } })

    // Chunked, with no Content-Length to refuse up front: cut off once it grows past the limit.
    const chunked = await send(agent, {
      method: 'POST',
      path: '/v1/operations/claim',
      headers: { ...bearer, 'transfer-encoding': 'chunked' },
      body: claimBody({ blob: 'x'.repeat(128 * 1024) }),
    })
    expect(chunked.status).toBe(413)

    const small = await send(agent, {
      method: 'POST',
      path: '/v1/operations/claim',
      headers: bearer,
      body: claimBody({ blob: 'x'.repeat(1024) }),
    })
    expect(small.status).toBe(200)
    agent.destroy()
  })

  it('a 413 on a kept-alive connection tells the client to close, so its next request is not reset', async () => {
    // One socket at most: the second request goes wherever the agent believes the first one left it.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    for (const path of ['/webhooks/acme', '/v1/operations/claim']) {
      const body = JSON.stringify({ type: 'big', blob: 'x'.repeat(256 * 1024) })
      const refused = await send(agent, {
        method: 'POST',
        path,
        headers: { ...bearer, ...signedHeaders(body, { id: 'evt_big' }) },
        body,
      })
      expect(refused.status).toBe(413)
      expect(refused.headers.connection).toBe('close')
      const next = await send(agent, { method: 'GET', path: '/healthz' })
      expect(next.status).toBe(200)
    }
    agent.destroy()
  })
})

/** Resolves with what the server wrote once it closes the connection, or `still open` at `patienceMs`. */
function waitForClose(socket: Socket, patienceMs: number): Promise<{ closed: boolean; received: string }> {
  return new Promise((resolve) => {
    let received = ''
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1')
    })
    const timer = setTimeout(() => resolve({ closed: false, received }), patienceMs)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ closed: true, received })
    })
    socket.on('error', () => {})
  })
}

function openSocket(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(origin.port), origin.hostname, () => resolve(socket))
    socket.on('error', reject)
  })
}

describe('slow clients', () => {
  it('a body dripped one byte at a time is answered 408 and cut off at server.requestTimeoutMs', async () => {
    const socket = await openSocket()
    socket.write('POST /webhooks/acme HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n')
    // 100 bytes at one per 100 ms would take 10 s; the request timeout is 1 s.
    const drip = setInterval(() => {
      if (!socket.destroyed) socket.write('x')
    }, 100)
    const outcome = await waitForClose(socket, 8000)
    clearInterval(drip)
    socket.destroy()
    expect(outcome.closed).toBe(true)
    expect(outcome.received).toMatch(/^HTTP\/1\.1 408/)
  })

  it('headers dripped one line at a time are answered 408 and cut off at server.headersTimeoutMs', async () => {
    const socket = await openSocket()
    socket.write('POST /webhooks/acme HTTP/1.1\r\n')
    let line = 0
    const drip = setInterval(() => {
      if (!socket.destroyed) socket.write(`X-Slow-${line++}: y\r\n`)
    }, 100)
    const outcome = await waitForClose(socket, 8000)
    clearInterval(drip)
    socket.destroy()
    expect(outcome.closed).toBe(true)
    expect(outcome.received).toMatch(/^HTTP\/1\.1 408/)
  })
})
