import type { Verifier, VerifierContext } from '../../config/verifier.js'
import type { SchemeName, VerifyConfig, VerifyConfigOf } from '../../config/verify.js'
import { hmac } from './hmac.js'
import { github, paddle, shopify, square, stripe } from './presets.js'
import { slack } from './slack.js'
import { standardWebhooks } from './standard-webhooks.js'
import type { Scheme, SigningInput } from './types.js'

/**
 * The scheme table: the one place a scheme name leads to its code. Written as a mapped type so that
 * `TABLE[config.scheme]` takes exactly that scheme's config without a cast or a switch, and a scheme
 * added to the config's union (src/config/verify.ts) but not here fails to compile.
 */
type SchemeTable = { [Name in SchemeName]: Scheme<Name> }

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

/**
 * A source's verifier, its secrets resolved and checked: a secret its scheme cannot use is a
 * ConfigError naming the field. The config's one assembly (src/service/config.ts) calls this for
 * every source at start-up.
 */
export function createVerifier<Name extends SchemeName>(
  config: VerifyConfigOf<Name>,
  context: VerifierContext,
): Verifier {
  const scheme: SchemeTable[Name] = TABLE[config.scheme]
  return scheme.create(config, context)
}

/** The headers a sender using `config` would add to a delivery, signed with each of `secrets`. */
export function signWith<Name extends SchemeName>(
  config: VerifyConfigOf<Name>,
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

export { ConfigError } from '../../config/errors.js'
export type { SigningInput } from './types.js'
