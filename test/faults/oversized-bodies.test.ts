import { execFile } from 'node:child_process'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { beforeAll, describe, expect, it } from 'vitest'
import type { Child } from '../support/child.js'
import { serviceHarness } from '../support/service.js'
import { signedHeaders, TEST_SECRET } from '../support/signing.js'

/**
 * A client that sends a whole body over the limit must be able to read the 413: `fetch` (undici)
 * writes the body before it reads the answer, and a server that closes the socket while the body is
 * still coming makes it fail with EPIPE / "other side closed" instead. The service runs in a child
 * process: sharing the test's event loop, the server cannot close the socket before the client wrote.
 */
const AGENT_TOKEN = 'agent-token-for-oversized-bodies'
const TEN_MB = 10 * 1024 * 1024
const harness = serviceHarness({
  folder: 'hl-oversized-',
  config: {
    sources: [
      {
        id: 'acme',
        verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
        handler: { type: 'forward', url: 'http://127.0.0.1:9/unused' },
        bodyLimitBytes: 4096,
      },
    ],
    server: { operationsBodyLimitBytes: 64 * 1024 },
  },
  // Empty counts as unset: the in-process queue, whatever the runner's environment carries.
  env: { REDIS_URL: '', AGENT_TOKEN, LOG_LEVEL: 'warn' },
  keepBetweenTests: true,
})
let running: Child

beforeAll(async () => {
  running = await harness.startChild()
})

const claimBody = () =>
  JSON.stringify({
    key: `oversized:${Math.random()}`,
    tool: 'demo.tool',
    effect: 'idempotent',
    args: { blob: 'x'.repeat(TEN_MB) },
  })
const bearer = { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' }

function webhookBody() {
  const body = JSON.stringify({ type: 'big', blob: 'x'.repeat(TEN_MB) })
  return { body, headers: signedHeaders(body, { id: `evt_big_${Math.random()}` }) }
}

/** Whether the socket is closed before the client wrote it all is a race: each case runs a few times. */
const TRIES = 3

function streamOf(text: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text)
  return new ReadableStream({
    start(controller) {
      for (let at = 0; at < bytes.length; at += 64 * 1024)
        controller.enqueue(bytes.subarray(at, at + 64 * 1024))
      controller.close()
    },
  })
}

async function expectReadable413(path: string, init: () => RequestInit) {
  for (let n = 0; n < TRIES; n++) {
    const response = await fetch(`${running.url}${path}`, { method: 'POST', ...init() })
    expect(response.status).toBe(413)
    expect(response.headers.get('connection')).toBe('close')
    expect(await response.json()).toMatchObject({ error: { code: 'payload_too_large' } })
  }
}

describe('a 10 MB body over the limit', () => {
  it('fetch reads the 413 and its JSON error from /v1/operations, declared or streamed', async () => {
    await expectReadable413('/v1/operations/claim', () => ({ headers: bearer, body: claimBody() }))
    await expectReadable413(
      '/v1/operations/claim',
      () => ({ headers: bearer, body: streamOf(claimBody()), duplex: 'half' }) as RequestInit,
    )
  })

  it('fetch reads the 413 and its JSON error from /webhooks/:source, declared or streamed', async () => {
    await expectReadable413('/webhooks/acme', () => webhookBody())
    await expectReadable413('/webhooks/acme', () => {
      const { body, headers } = webhookBody()
      return { headers, body: streamOf(body), duplex: 'half' } as RequestInit
    })
  })

  it.skipIf(!existsSync('/usr/bin/curl'))(
    'curl reads the 413 and its JSON error on both routes',
    async () => {
      const run = promisify(execFile)
      const cases = [
        { path: '/v1/operations/claim', body: claimBody(), headers: bearer },
        { path: '/webhooks/acme', ...webhookBody() },
      ]
      for (const [index, { path, body, headers }] of cases.entries()) {
        const file = join(harness.directory, `body-${index}.json`)
        writeFileSync(file, body)
        const { stdout } = await run('/usr/bin/curl', [
          '--silent',
          '--show-error',
          '--write-out',
          '\n%{http_code}',
          ...Object.entries(headers).flatMap(([name, value]) => ['-H', `${name}: ${value}`]),
          '--data-binary',
          `@${file}`,
          `${running.url}${path}`,
        ])
        const [answer, status] = stdout.split('\n')
        expect(status).toBe('413')
        expect(JSON.parse(answer ?? '')).toMatchObject({ error: { code: 'payload_too_large' } })
      }
    },
  )
})
