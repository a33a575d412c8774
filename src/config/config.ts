/**
 * The config as the code uses it: the file's sections, checked, and each source ready to receive.
 * The vocabulary lives in this folder, one file per concern, and imports nothing above it; the one
 * check that needs a feature's code (building each source's verifier from its secrets) is handed in
 * by the one assembly, `buildConfig`/`loadConfig` in src/service/config.ts.
 */

import { type AgentToken, resolveNamedAgentTokens } from './agents.js'
import { type AlertChannelConfig, resolveAlertChannel } from './alerts.js'
import { resolveBackfill, type SourceBackfill } from './backfill.js'
import { ConfigError } from './errors.js'
import { type ConfigFile, parseConfigFile } from './file.js'
import { resolveRouteHeaders } from './routes.js'
import { type Lookup, resolveSecretReference } from './secrets.js'
import { eventIdIsSigned, unsignedDedupParts } from './signed-parts.js'
import type { SourceConfig } from './source.js'
import type { Verifier, VerifierContext } from './verifier.js'
import type { VerifyConfig } from './verify.js'

/** A source ready to receive: its settings plus a verifier whose secrets were checked at start-up. */
export interface Source {
  config: SourceConfig
  verifier: Verifier
  bodyLimitBytes: number
  /** Whether a resent body under a fresh event id is a duplicate (see sourceSchema.dedupOnBody). */
  dedupOnBody: boolean
  /** Present when the source has a backfill block. */
  backfill?: SourceBackfill
}

export interface Config {
  file: ConfigFile
  sources: ReadonlyMap<string, Source>
  /** The alert channels with their secrets and URLs resolved (`env:NAME` looked up). */
  alertChannels: readonly AlertChannelConfig[]
  /** The agents' API's named tokens (`agents.tokens`), secrets looked up; AGENT_TOKEN is not among them. */
  agentTokens: readonly AgentToken[]
}

export interface BuildOptions {
  /**
   * Build the verifier of this source only (`sign` and `replay` use one source): every source is
   * still checked against the schema, but another source's secrets are not looked up, so a secret
   * missing for an unrelated source does not block this one.
   */
  onlySource?: string
}

/** What only the features can build from a config, handed in by src/service/config.ts. */
export interface FeatureParts {
  /** A source's verifier, its secrets resolved; a ConfigError for a secret its scheme cannot use. */
  createVerifier(verify: VerifyConfig, context: VerifierContext): Verifier
}

/**
 * Validates a parsed config file and builds its sources with the features' `parts`. Every problem
 * names the source and the field, and all of them are reported at once; secrets named as `env:NAME`
 * are resolved through `lookup`, so none needs to be in the file.
 */
export function assembleConfig(
  input: unknown,
  lookup: Lookup,
  parts: FeatureParts,
  options: BuildOptions = {},
): Config {
  const file = parseConfigFile(input)
  const problems: string[] = []
  const sources = new Map<string, Source>()
  const seenIds = new Set<string>()
  for (const source of file.sources) {
    const where = `source '${source.id}'`
    if (seenIds.has(source.id)) {
      problems.push(`${where}: id is used by another source`)
      continue
    }
    seenIds.add(source.id)
    if (source.handler !== undefined && source.routes !== undefined) {
      problems.push(`${where}: has both "handler" and "routes"; a source delivers through one of them`)
      continue
    }
    if (source.retentionDays > file.retention.dedupWindowDays) {
      problems.push(
        `${where}: retentionDays (${source.retentionDays}) is longer than retention.dedupWindowDays ` +
          `(${file.retention.dedupWindowDays}): a provider's retry of an event still kept would be claimed ` +
          'again. Raise retention.dedupWindowDays to at least it.',
      )
    }
    const dedupOnBody = source.dedupOnBody ?? !eventIdIsSigned(source.verify)
    for (const problem of unsignedDedupParts(source.verify, source.dedupKey, dedupOnBody)) {
      problems.push(`${where}: ${problem}`)
    }
    if (options.onlySource !== undefined && source.id !== options.onlySource) continue
    const resolveSecret = (reference: string, field: string) =>
      resolveSecretReference(reference, field, lookup)
    try {
      const verifier = parts.createVerifier(source.verify, { sourceId: source.id, resolveSecret })
      const backfill =
        source.backfill === undefined
          ? undefined
          : resolveBackfill(source.backfill, source.verify.scheme, lookup, {
              credentialRequired: source.backfill.enabled || options.onlySource === source.id,
            })
      sources.set(source.id, {
        config:
          source.routes === undefined
            ? source
            : { ...source, routes: resolveRouteHeaders(source.routes, resolveSecret) },
        verifier,
        bodyLimitBytes: source.bodyLimitBytes ?? file.server.bodyLimitBytes,
        dedupOnBody,
        ...(backfill === undefined ? {} : { backfill }),
      })
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems.push(`${where}: ${error.message}`)
    }
  }
  const everything = options.onlySource === undefined
  const alertChannels = everything ? resolveAlertChannels(file, lookup, problems) : []
  const agentTokens = everything ? namedAgentTokens(file, lookup, problems) : []
  if (problems.length > 0) {
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
  return { file, sources, alertChannels, agentTokens }
}

function resolveAlertChannels(file: ConfigFile, lookup: Lookup, problems: string[]): AlertChannelConfig[] {
  return file.alerts.channels.flatMap((channel): AlertChannelConfig[] => {
    try {
      return [resolveAlertChannel(channel, lookup)]
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems.push(`alerts channel '${channel.id}': ${error.message}`)
      return []
    }
  })
}

function namedAgentTokens(file: ConfigFile, lookup: Lookup, problems: string[]): AgentToken[] {
  try {
    return resolveNamedAgentTokens(file.agents, lookup)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    problems.push(error.message)
    return []
  }
}

// The names the rest of the code imports from here, wherever in this folder they are defined.
export type { SourceBackfill } from './backfill.js'
export { ConfigError } from './errors.js'
export { type ConfigFile, configFileSchema } from './file.js'
export { resolveSecretReference } from './secrets.js'
export { DEFAULT_RETENTION_DAYS, type SourceConfig } from './source.js'
