import { z } from 'zod'
import { jsonPointerSchema } from './json-pointer.js'

/**
 * A source's `verify` block: its provider's signature scheme and that scheme's settings. How each
 * scheme verifies a delivery is src/inbound/verifiers/ (presets.ts for the providers signing one HMAC
 * header, a file for each other scheme); the facts a config check needs
 * about what each one signs are ./signed-parts.ts.
 */

/** One or more secrets, each a literal or `env:NAME`; several at once are accepted for rotation. */
const secretsField = z.array(z.string().min(1)).min(1, 'needs at least one secret')

/** How far a signed timestamp may be from the server's clock, both ways. */
const toleranceField = z
  .number()
  .int()
  .min(1)
  .max(7 * 24 * 3600)
  .default(300)

/** A scheme whose settings are its secrets alone (it signs no timestamp). */
const secretsOnly = <Name extends string>(scheme: Name) =>
  z.object({ scheme: z.literal(scheme), secrets: secretsField })

/** A scheme whose settings are its secrets and how far its signed timestamp may be off. */
const timestamped = <Name extends string>(scheme: Name) =>
  z.object({ scheme: z.literal(scheme), secrets: secretsField, toleranceSeconds: toleranceField })

const square = z.object({
  scheme: z.literal('square'),
  secrets: secretsField,
  /** The notification URL exactly as entered in Square's developer console. */
  notificationUrl: z.url({ protocol: /^https?$/, error: 'must be the http(s) URL registered with Square' }),
})

const headerName = z
  .string()
  .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be an HTTP header name')
  .transform((name) => name.toLowerCase())

const locator = z.union([
  z.object({ header: headerName }).strict(),
  z.object({ jsonPointer: jsonPointerSchema('/data/id') }).strict(),
])

/** The generic scheme for senders without one of their own (src/inbound/verifiers/hmac.ts). */
const hmac = z.object({
  scheme: z.literal('hmac'),
  secrets: secretsField,
  /** How the configured secrets are turned into key bytes. */
  secretEncoding: z.enum(['utf8', 'hex', 'base64']).default('utf8'),
  header: headerName,
  algorithm: z.enum(['sha256', 'sha512']).default('sha256'),
  encoding: z.enum(['hex', 'base64']).default('hex'),
  /** Text before each signature, e.g. `sha256=`; entries without it are ignored. */
  prefix: z.string().default(''),
  timestamp: z
    .object({
      header: headerName,
      toleranceSeconds: toleranceField,
    })
    .strict()
    .optional(),
  /** `{body}`, `{timestamp}` and `{id}` are replaced; everything else is literal. */
  signedContent: z.string().default('{body}'),
  eventId: locator,
  eventType: locator.optional(),
  /** How long this sender retries, if known; used like the built-in schemes' horizons. */
  retryHorizonSeconds: z.number().int().min(0).optional(),
})

/**
 * Every signature scheme a source can name. A scheme that is not listed here fails config
 * validation: there is no "accept" fallback. Each needs its verifier in the scheme table
 * (src/inbound/verifiers/index.ts), or the build fails.
 */
export const verifyConfigSchema = z.discriminatedUnion('scheme', [
  // Its secrets: `whsec_…` HMAC secrets and/or `whpk_…` ed25519 public keys, in any mix.
  timestamped('standard-webhooks'),
  timestamped('stripe'),
  secretsOnly('github'),
  secretsOnly('shopify'),
  timestamped('slack'),
  timestamped('paddle'),
  square,
  hmac,
])
export type VerifyConfig = z.infer<typeof verifyConfigSchema>
/** A verify config as written in the config file (defaults not yet applied). */
export type VerifyConfigInput = z.input<typeof verifyConfigSchema>
export type SchemeName = VerifyConfig['scheme']
/** One scheme's verify config: `VerifyConfigOf<'hmac'>`. */
export type VerifyConfigOf<Name extends SchemeName> = Extract<VerifyConfig, { scheme: Name }>
