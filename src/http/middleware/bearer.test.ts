import { Hono } from 'hono'
import { describe, expect, it } from 'vitest'
import { createLogger } from '../../logger.js'
import { handleError } from '../errors.js'
import { bearerAuth } from './bearer.js'

const TOKEN = 'agent-token-0123456789'

function appWith(token: string | undefined) {
  const app = new Hono()
  app.onError(handleError(createLogger('silent')))
  app.use('/v1/*', bearerAuth(token, "agents' API", 'AGENT_TOKEN'))
  app.get('/v1/ping', (c) => c.text('pong'))
  return app
}

describe('bearerAuth', () => {
  it("lets the configured token through, whatever the scheme's case", async () => {
    for (const scheme of ['Bearer', 'bearer']) {
      const response = await appWith(TOKEN).request('/v1/ping', {
        headers: { authorization: `${scheme} ${TOKEN}` },
      })
      expect(response.status).toBe(200)
      expect(await response.text()).toBe('pong')
    }
  })

  it.each([
    ['no header', undefined],
    ['a wrong token', 'Bearer agent-token-9999999999'],
    ['a prefix of the token', `Bearer ${TOKEN.slice(0, 10)}`],
    ['another scheme', `Basic ${TOKEN}`],
    ['two tokens', `Bearer ${TOKEN} ${TOKEN}`],
  ])('answers 401 unauthorized with WWW-Authenticate for %s', async (_, authorization) => {
    const headers: Record<string, string> = authorization === undefined ? {} : { authorization }
    const response = await appWith(TOKEN).request('/v1/ping', { headers })
    expect(response.status).toBe(401)
    expect(response.headers.get('www-authenticate')).toBe('Bearer')
    expect(await response.json()).toEqual({
      error: { code: 'unauthorized', message: "a valid bearer token is required for the agents' API" },
    })
  })

  it('fails closed: with no token configured every request is refused, even one that sends a token', async () => {
    const response = await appWith(undefined).request('/v1/ping', {
      headers: { authorization: `Bearer ${TOKEN}` },
    })
    expect(response.status).toBe(403)
    expect(await response.json()).toEqual({
      error: { code: 'api_disabled', message: "the agents' API is off: set AGENT_TOKEN to enable it" },
    })
  })
})
