import { createHash } from 'node:crypto'
import { z } from 'zod'
import { ConfigError } from './errors.js'
import { MAX_AGENT_KEY_LENGTH } from './operation-keys.js'

const TOKEN_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/
const TOOL_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/

/** The name `AGENT_TOKEN` goes by in the audit: one token with the whole agents' space. */
export const DEFAULT_AGENT_TOKEN_NAME = 'default'

/**
 * Named tokens of the agents' API, for a team running more than one agent: each reaches only the
 * keys starting with one of its prefixes (and, if listed, only its tools), and its name is the
 * actor in the audit of everything it does.
 */
export const agentsSchema = z
  .object({
    tokens: z
      .array(
        z
          .object({
            name: z.string().regex(TOKEN_NAME, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
            /** `env:NAME`: a bearer token is a secret, never written in the file. */
            token: z
              .string()
              .regex(/^env:[A-Za-z_][A-Za-z0-9_]*$/, 'must be env:NAME (the token is a secret)'),
            keyPrefixes: z.array(z.string().min(1).max(MAX_AGENT_KEY_LENGTH)).min(1).max(64),
            tools: z.array(z.string().regex(TOOL_NAME, 'must be a tool name')).min(1).max(256).optional(),
          })
          .strict(),
      )
      .max(64)
      .default([]),
  })
  .strict()
  .prefault({})

export type AgentsConfig = z.infer<typeof agentsSchema>

/** A token of the agents' API, ready to compare: its digest only, and its scope. */
export interface AgentToken {
  name: string
  /** sha256 of the token, compared with timingSafeEqual. */
  digest: Buffer
  /** Null: the whole agents' space (AGENT_TOKEN). */
  keyPrefixes: readonly string[] | null
  /** Null: any tool. */
  tools: ReadonlySet<string> | null
}

export const tokenDigest = (token: string): Buffer => createHash('sha256').update(token).digest()

/**
 * The config's named tokens, their secrets looked up (at start-up, with every other secret of the
 * file). Two tokens with one name or one value are refused: the audit must say which agent acted.
 */
export function resolveNamedAgentTokens(
  agents: AgentsConfig,
  lookup: (name: string) => string | undefined,
): AgentToken[] {
  const tokens: AgentToken[] = []
  for (const entry of agents.tokens) {
    const where = `agents.tokens '${entry.name}'`
    if (tokens.some((token) => token.name === entry.name)) {
      throw new ConfigError(`${where}: the name is used by another token`)
    }
    const variable = entry.token.slice('env:'.length)
    const value = lookup(variable)
    if (value === undefined) throw new ConfigError(`${where}: environment variable ${variable} is not set`)
    if (value.length < 16) throw new ConfigError(`${where}: ${variable} must be at least 16 characters`)
    const digest = tokenDigest(value)
    const twin = tokens.find((token) => token.digest.equals(digest))
    if (twin !== undefined) {
      throw new ConfigError(`${where}: ${variable} has the same value as token '${twin.name}'`)
    }
    tokens.push({
      name: entry.name,
      digest,
      keyPrefixes: entry.keyPrefixes,
      tools: entry.tools === undefined ? null : new Set(entry.tools),
    })
  }
  return tokens
}

/**
 * Every token of the agents' API: `AGENT_TOKEN` (named `default`, the whole agents' space, as it
 * always was) and the config's named ones.
 */
export function agentTokensOf(agentToken: string | undefined, named: readonly AgentToken[]): AgentToken[] {
  if (agentToken === undefined) return [...named]
  const digest = tokenDigest(agentToken)
  for (const token of named) {
    if (token.name === DEFAULT_AGENT_TOKEN_NAME) {
      throw new ConfigError(
        `agents.tokens '${token.name}': the name '${DEFAULT_AGENT_TOKEN_NAME}' is AGENT_TOKEN's; choose another`,
      )
    }
    if (token.digest.equals(digest)) {
      throw new ConfigError(`agents.tokens '${token.name}': its token has the same value as AGENT_TOKEN`)
    }
  }
  return [{ name: DEFAULT_AGENT_TOKEN_NAME, digest, keyPrefixes: null, tools: null }, ...named]
}
