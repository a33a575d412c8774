/**
 * Helpers for tests that send signed deliveries to hookledger (or to any receiver of these schemes):
 * `import { signDelivery } from 'hookledger/testing'`.
 */

import {
  type SchemeName,
  type VerifyConfig,
  type VerifyConfigInput,
  verifyConfigSchema,
} from './config/verify.js'
import { ConfigError, signWith } from './inbound/verifiers/index.js'

type WithoutSecrets<T> = T extends unknown ? Omit<T, 'secrets'> & { secrets?: string[] } : never

/** A scheme by name, or a source's whole `verify` block (required for `square` and `hmac`). */
export type SigningScheme = SchemeName | WithoutSecrets<VerifyConfigInput>

export interface SignDeliveryOptions {
  /**
   * The event id, for schemes that carry it in a header: `webhook-id` (Standard Webhooks, random
   * when absent), `X-GitHub-Delivery`, `X-Shopify-Webhook-Id`, or the hmac scheme's id header.
   */
  id?: string
  /** When the delivery was signed; defaults to now. A number is Unix seconds. */
  timestamp?: Date | number
}

/**
 * The headers a provider would send with `body`: signature, timestamp and (when given) id headers,
 * lower-cased. Several secrets give several signatures, as a sender does while rotating. Add the
 * content type and any provider headers (`X-GitHub-Event`, …) yourself.
 *
 * Standard Webhooks: a `whsec_` secret signs v1 (HMAC), a `whsk_` key signs v1a (ed25519); the
 * receiver is configured with the matching `whpk_` public key.
 */
export function signDelivery(
  scheme: SigningScheme,
  secret: string | readonly string[],
  body: string | Uint8Array,
  options: SignDeliveryOptions = {},
): Record<string, string> {
  const secrets = typeof secret === 'string' ? [secret] : [...secret]
  if (secrets.length === 0) throw new ConfigError('signDelivery: give at least one secret')
  const config = resolveScheme(scheme, secrets)
  const timestamp =
    options.timestamp === undefined
      ? Math.floor(Date.now() / 1000)
      : typeof options.timestamp === 'number'
        ? options.timestamp
        : Math.floor(options.timestamp.getTime() / 1000)
  const raw = typeof body === 'string' ? Buffer.from(body, 'utf8') : body
  return signWith(config, secrets, { raw, timestamp, id: options.id })
}

function resolveScheme(scheme: SigningScheme, secrets: string[]): VerifyConfig {
  const input = typeof scheme === 'string' ? { scheme } : scheme
  const parsed = verifyConfigSchema.safeParse({ ...input, secrets })
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (issue) => `${issue.path.join('.') || 'scheme'}: ${issue.message}`,
    )
    throw new ConfigError(`signDelivery: ${problems.join('; ')}`)
  }
  return parsed.data
}

/**
 * The header that carries the event id for `config`, when the id lives in a header (so a replay
 * reuses the fixture's id and the ledger sees a duplicate, not a new event).
 */
export function idHeaderOf(config: VerifyConfig): string | undefined {
  switch (config.scheme) {
    case 'standard-webhooks':
      return 'webhook-id'
    case 'github':
      return 'x-github-delivery'
    case 'shopify':
      return 'x-shopify-webhook-id'
    case 'hmac':
      return 'header' in config.eventId ? config.eventId.header : undefined
    default:
      return undefined
  }
}

export type { SchemeName, VerifyConfigInput } from './config/verify.js'
export { type Fixture, FixtureError, listFixtures, readFixture } from './fixtures.js'
export {
  generateStandardWebhooksKeyPair,
  standardWebhooksPublicKeyOf,
} from './inbound/verifiers/standard-webhooks.js'
