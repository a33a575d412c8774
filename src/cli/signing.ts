import { randomBytes } from 'node:crypto'
import { ConfigError, resolveSecretReference } from '../config/config.js'
import type { ClientEnvironment } from '../config/env.js'
import type { VerifyConfig } from '../config/verify.js'
import { type Fixture, headerValue } from '../fixtures.js'
import { signWith } from '../inbound/verifiers/index.js'
import { loadConfig } from '../service/config.js'
import { idHeaderOf } from '../testing.js'

/** The flags `sign` and `replay` share: which source, its config file, the secret, where to send. */
export const SIGNING_FLAGS = {
  source: { type: 'string' },
  config: { type: 'string' },
  secret: { type: 'string' },
  url: { type: 'string' },
} as const

/** What `sign` and `replay` need to sign for one source, loaded as `serve` loads it. */
export interface SigningContext {
  sourceId: string
  config: VerifyConfig
  secret: string
}

/**
 * Loads the config file (every source is validated, as at start-up, but only this source's secrets
 * are looked up) and picks the secret to sign with: `--secret` when given, else the source's first secret that can sign.
 */
export async function loadSigningContext(
  env: ClientEnvironment,
  options: { sourceId: string; secret?: string | undefined },
): Promise<SigningContext> {
  const loaded = await loadConfig(env.HOOKLEDGER_CONFIG, env.lookup, { onlySource: options.sourceId })
  const source = loaded.sources.get(options.sourceId)
  if (source === undefined) {
    const known = loaded.file.sources.map(({ id }) => id).join(', ') || 'none'
    throw new ConfigError(`no source '${options.sourceId}' in ${env.HOOKLEDGER_CONFIG} (sources: ${known})`)
  }
  const config = source.config.verify
  if (options.secret !== undefined) {
    return {
      sourceId: options.sourceId,
      config,
      secret: resolveSecretReference(options.secret, '--secret', env.lookup),
    }
  }
  const secrets = config.secrets.map((reference, index) =>
    resolveSecretReference(reference, `verify.secrets[${index}]`, env.lookup),
  )
  // A whpk_ key verifies v1a but cannot sign; the sender's whsk_ key has to come from --secret.
  const secret = secrets.find((candidate) => !candidate.startsWith('whpk_'))
  if (secret === undefined) {
    throw new ConfigError(
      `source '${options.sourceId}' holds only whpk_ public keys; pass --secret whsk_… (or env:NAME) to sign`,
    )
  }
  return { sourceId: options.sourceId, config, secret }
}

/**
 * The fixture's headers plus fresh signature headers, as the provider would send them now. The
 * event id header the fixture carries is kept, so every replay of one fixture is the same event.
 */
export function signFixture(
  context: SigningContext,
  fixture: Fixture,
  options: { timestamp: number; fallbackId: string },
): Array<[string, string]> {
  const idHeader = idHeaderOf(context.config)
  const fixtureId = idHeader === undefined ? undefined : headerValue(fixture.headers, idHeader)
  const id = fixtureId ?? (context.config.scheme === 'standard-webhooks' ? options.fallbackId : undefined)
  const signed = signWith(context.config, [context.secret], {
    raw: fixture.body,
    timestamp: options.timestamp,
    id,
  })
  // A signed header the fixture also names (its id header) keeps the fixture's spelling and place.
  const headers: Array<[string, string]> = fixture.headers.map(([name, value]) => [
    name,
    signed[name.toLowerCase()] ?? value,
  ])
  const present = new Set(headers.map(([name]) => name.toLowerCase()))
  if (!present.has('content-type')) headers.push(['Content-Type', 'application/json'])
  return [...headers, ...Object.entries(signed).filter(([name]) => !present.has(name))]
}

/** A stable-per-fixture id for senders whose id is part of the signature (Standard Webhooks). */
export function freshMessageId(): string {
  return `msg_${randomBytes(12).toString('base64url')}`
}

/** Where deliveries for `sourceId` go: `--url` as the service's base URL, else this machine's PORT. */
export function webhookUrl(base: string | undefined, env: ClientEnvironment, sourceId: string): string {
  const root = (base ?? `http://127.0.0.1:${env.PORT}`).replace(/\/+$/, '')
  return `${root}/webhooks/${encodeURIComponent(sourceId)}`
}
