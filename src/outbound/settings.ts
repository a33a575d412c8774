import type { OutboundSettings } from '../config/outbound.js'
import type { RetryPolicy } from './tools.js'

/**
 * The bounded retry of one tool, by name, for every caller alike (in-process `invoke` and agents over
 * HTTP): the tool's own `retry`, else `outbound.tools.<name>`, else the section's defaults.
 */
export function retryPolicyFor(
  settings: OutboundSettings,
  toolName: string,
  own: Partial<RetryPolicy> | undefined,
): RetryPolicy {
  const configured = settings.tools[toolName]
  return {
    attempts: own?.attempts ?? configured?.maxAttempts ?? settings.maxAttempts,
    baseDelayMs: own?.baseDelayMs ?? configured?.backoffBaseMs ?? settings.backoffBaseMs,
    maxDelayMs: own?.maxDelayMs ?? configured?.backoffMaxMs ?? settings.backoffMaxMs,
  }
}
