import { connect } from 'node:net'
import { describe, expect, it } from 'vitest'
import { captureLogs } from '../support/log-capture.js'
import { startTestService } from '../support/service.js'

/** Sends the head of a POST and part of its body, then closes the socket: a client that gave up. */
function abandonRequest(url: string, path: string): Promise<void> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n` +
          'Content-Length: 10000\r\nwebhook-id: msg_abandoned\r\nwebhook-timestamp: 1\r\n' +
          'webhook-signature: v1,AAAA\r\n\r\n{"type":"partial',
      )
      setTimeout(() => socket.destroy(), 200)
    })
    socket.on('close', () => resolve())
    socket.on('error', reject)
  })
}

describe('a client that hangs up mid-request', () => {
  it('is logged at debug level as a client abort, never as an unhandled error', async () => {
    const { logger, entries } = captureLogs('debug')
    const running = await startTestService({ role: 'api', logger })
    try {
      await abandonRequest(running.url, '/webhooks/acme')
      await expect
        .poll(() => entries().filter((entry) => entry.path === '/webhooks/acme'), { timeout: 5000 })
        .toHaveLength(1)
      const [logged] = entries().filter((entry) => entry.path === '/webhooks/acme')
      expect(logged).toMatchObject({ level: 20, msg: 'client closed the connection mid-request' })
      expect(entries().filter((entry) => Number(entry.level) >= 50)).toEqual([])
      // The server carries on.
      expect((await fetch(`${running.url}/healthz`)).status).toBe(200)
    } finally {
      await running.close()
    }
  })
})
