import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { createLogger } from '../../src/logger.js'

function capture() {
  const lines: string[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString())
      done()
    },
  })
  return { logger: createLogger('info', stream), text: () => lines.join('') }
}

describe('logs', () => {
  it('redact credentials and every provider signature header, at the top level and one level down', () => {
    const { logger, text } = capture()
    const headers = {
      authorization: 'Bearer tok_live_123',
      cookie: 'hl_admin=sess_456',
      'webhook-signature': 'v1,c2lnX3N3',
      'stripe-signature': 't=1,v1=sig_stripe',
      'x-hub-signature-256': 'sha256=sig_github',
      'x-shopify-hmac-sha256': 'sig_shopify',
      'x-slack-signature': 'v0=sig_slack',
      'paddle-signature': 'ts=1;h1=sig_paddle',
      'x-square-hmacsha256-signature': 'sig_square',
      'content-type': 'application/json',
    }
    logger.info({ headers, secret: 'whsec_abc', delivery: { headers, token: 'tok_789' } }, 'received')
    const output = text()
    for (const leaked of ['tok_live_123', 'sess_456', 'c2lnX3N3', 'sig_', 'whsec_abc', 'tok_789']) {
      expect(output).not.toContain(leaked)
    }
    expect(output).toContain('application/json') // other headers stay readable
    expect(output).toContain('[redacted]')
  })
})
