import { timingSafeEqual } from 'node:crypto'
import { createMiddleware } from 'hono/factory'
import { type AgentToken, tokenDigest } from '../../config/agents.js'
import { ApiError } from '../errors.js'

export type AgentVariables = { agent: AgentToken }

/**
 * The agents' API's bearer auth: which named token is calling (its scope then decides every key it
 * may touch). Fails closed like `bearerAuth`: no token configured, every request is refused. Every
 * token's digest is compared, whichever matches, so timing says nothing about which one did.
 */
export function agentAuth(tokens: readonly AgentToken[]) {
  return createMiddleware<{ Variables: AgentVariables }>(async (c, next) => {
    if (tokens.length === 0) {
      throw new ApiError(
        403,
        'api_disabled',
        "the agents' API is off: set AGENT_TOKEN (or agents.tokens in the config) to enable it",
      )
    }
    const match = /^Bearer\s+(\S+)$/i.exec(c.req.header('authorization') ?? '')
    const presented = match?.[1] === undefined ? undefined : tokenDigest(match[1])
    let caller: AgentToken | undefined
    for (const token of tokens) {
      if (presented !== undefined && timingSafeEqual(presented, token.digest)) caller = token
    }
    if (caller === undefined) {
      throw new ApiError(401, 'unauthorized', "a valid bearer token is required for the agents' API", {
        headers: { 'WWW-Authenticate': 'Bearer' },
      })
    }
    c.set('agent', caller)
    await next()
  })
}
