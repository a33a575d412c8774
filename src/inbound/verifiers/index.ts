import { z } from 'zod'
import { standardWebhooks } from './standard-webhooks.js'
import type { SecretResolver, Verifier } from './types.js'

/**
 * Every signature scheme a source can name. A scheme that is not listed here fails config
 * validation: there is no "accept" fallback.
 */
export const verifyConfigSchema = z.discriminatedUnion('scheme', [standardWebhooks.configSchema])
export type VerifyConfig = z.infer<typeof verifyConfigSchema>

export function createVerifier(
  config: VerifyConfig,
  context: { sourceId: string; resolveSecret: SecretResolver },
): Verifier {
  switch (config.scheme) {
    case 'standard-webhooks':
      return standardWebhooks.create(config, context)
  }
}

export type { Delivery, RejectionCode, Verification, Verifier } from './types.js'
export { ConfigError } from './types.js'
