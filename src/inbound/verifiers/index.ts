import { z } from 'zod'
import { github } from './github.js'
import { hmac } from './hmac.js'
import { paddle } from './paddle.js'
import { shopify } from './shopify.js'
import { slack } from './slack.js'
import { square } from './square.js'
import { standardWebhooks } from './standard-webhooks.js'
import { stripe } from './stripe.js'
import type { SecretResolver, SigningInput, Verifier } from './types.js'

/**
 * Every signature scheme a source can name. A scheme that is not listed here fails config
 * validation: there is no "accept" fallback.
 */
export const verifyConfigSchema = z.discriminatedUnion('scheme', [
  standardWebhooks.configSchema,
  stripe.configSchema,
  github.configSchema,
  shopify.configSchema,
  slack.configSchema,
  paddle.configSchema,
  square.configSchema,
  hmac.configSchema,
])
export type VerifyConfig = z.infer<typeof verifyConfigSchema>
/** A verify config as written in the config file (defaults not yet applied). */
export type VerifyConfigInput = z.input<typeof verifyConfigSchema>
export type SchemeName = VerifyConfig['scheme']

type ConfigOf = { [Name in SchemeName]: Extract<VerifyConfig, { scheme: Name }> }
type VerifierContext = { sourceId: string; resolveSecret: SecretResolver }

/**
 * The scheme table: the one place a scheme name leads to its code. Written as a mapped type so that
 * `TABLE[config.scheme]` takes exactly that scheme's config without a cast or a switch, and a scheme
 * added to the config union but not here fails to compile.
 */
type SchemeTable = {
  [Name in SchemeName]: {
    retryHorizonSeconds: number | null
    create(config: ConfigOf[Name], context: VerifierContext): Verifier
    sign(config: ConfigOf[Name], secrets: readonly string[], input: SigningInput): Record<string, string>
  }
}

export const SCHEMES = {
  'standard-webhooks': standardWebhooks,
  stripe,
  github,
  shopify,
  slack,
  paddle,
  square,
  hmac,
} as const satisfies SchemeTable

export const SCHEME_NAMES = Object.keys(SCHEMES) as SchemeName[]

const TABLE: SchemeTable = SCHEMES

export function createVerifier<Name extends SchemeName>(
  config: ConfigOf[Name],
  context: VerifierContext,
): Verifier {
  const scheme: SchemeTable[Name] = TABLE[config.scheme]
  return scheme.create(config, context)
}

/** The headers a sender using `config` would add to a delivery, signed with each of `secrets`. */
export function signWith<Name extends SchemeName>(
  config: ConfigOf[Name],
  secrets: readonly string[],
  input: SigningInput,
): Record<string, string> {
  const scheme: SchemeTable[Name] = TABLE[config.scheme]
  return scheme.sign(config, secrets, input)
}

/**
 * How long the sender behind `config` keeps retrying, in seconds (0: never automatically; null:
 * unknown). Dedup must outlive it, so a retention shorter than this is worth a warning.
 */
export function providerRetryHorizonSeconds(config: VerifyConfig): number | null {
  if (config.scheme === 'hmac') return config.retryHorizonSeconds ?? hmac.retryHorizonSeconds
  return SCHEMES[config.scheme].retryHorizonSeconds
}

/**
 * Whether the signature covers the event id. Where it does not (GitHub's X-GitHub-Delivery, Shopify's
 * X-Shopify-Event-Id, an `hmac` id header left out of signedContent), anyone holding one captured
 * delivery can resend it under a fresh id, so such sources also dedup on the body by default.
 */
export function eventIdIsSigned(config: VerifyConfig): boolean {
  switch (config.scheme) {
    case 'github':
    case 'shopify':
      return false
    case 'hmac':
      return 'jsonPointer' in config.eventId || config.signedContent.includes('{id}')
    default:
      // Standard Webhooks signs `{id}.{timestamp}.{body}`; the others read the id from the signed body.
      return true
  }
}

export { ConfigError } from '../../config/errors.js'
export type { Delivery, RejectionCode, SigningInput, Verification, Verifier } from './types.js'
