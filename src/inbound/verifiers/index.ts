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

export const SCHEMES = {
  'standard-webhooks': standardWebhooks,
  stripe,
  github,
  shopify,
  slack,
  paddle,
  square,
  hmac,
} as const

export const SCHEME_NAMES = Object.keys(SCHEMES) as SchemeName[]

export function createVerifier(
  config: VerifyConfig,
  context: { sourceId: string; resolveSecret: SecretResolver },
): Verifier {
  switch (config.scheme) {
    case 'standard-webhooks':
      return standardWebhooks.create(config, context)
    case 'stripe':
      return stripe.create(config, context)
    case 'github':
      return github.create(config, context)
    case 'shopify':
      return shopify.create(config, context)
    case 'slack':
      return slack.create(config, context)
    case 'paddle':
      return paddle.create(config, context)
    case 'square':
      return square.create(config, context)
    case 'hmac':
      return hmac.create(config, context)
  }
}

/** The headers a sender using `config` would add to a delivery, signed with each of `secrets`. */
export function signWith(
  config: VerifyConfig,
  secrets: readonly string[],
  input: SigningInput,
): Record<string, string> {
  switch (config.scheme) {
    case 'standard-webhooks':
      return standardWebhooks.sign(config, secrets, input)
    case 'stripe':
      return stripe.sign(config, secrets, input)
    case 'github':
      return github.sign(config, secrets, input)
    case 'shopify':
      return shopify.sign(config, secrets, input)
    case 'slack':
      return slack.sign(config, secrets, input)
    case 'paddle':
      return paddle.sign(config, secrets, input)
    case 'square':
      return square.sign(config, secrets, input)
    case 'hmac':
      return hmac.sign(config, secrets, input)
  }
}

/**
 * How long the sender behind `config` keeps retrying, in seconds (0: never automatically; null:
 * unknown). Dedup must outlive it, so a retention shorter than this is worth a warning.
 */
export function providerRetryHorizonSeconds(config: VerifyConfig): number | null {
  if (config.scheme === 'hmac') return config.retryHorizonSeconds ?? hmac.retryHorizonSeconds
  return SCHEMES[config.scheme].retryHorizonSeconds
}

export { ConfigError } from '../../config/errors.js'
export type { Delivery, RejectionCode, SigningInput, Verification, Verifier } from './types.js'
