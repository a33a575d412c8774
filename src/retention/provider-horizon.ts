import type { Config } from '../config/config.js'
import { providerRetryHorizonSeconds } from '../inbound/verifiers/index.js'

/**
 * Sources whose retention ends before their provider stops retrying. Retries arrive re-signed with
 * fresh timestamps, so only the ledger row catches them: once it is deleted, a late retry is new.
 */
export function retentionWarnings(config: Config): string[] {
  const warnings: string[] = []
  for (const [id, source] of config.sources) {
    const horizon = providerRetryHorizonSeconds(source.config.verify)
    if (horizon !== null && source.config.retentionDays * 86_400 < horizon) {
      warnings.push(
        `source '${id}': retentionDays ${source.config.retentionDays} is shorter than the ` +
          `${source.config.verify.scheme} retry horizon (${(horizon / 3600).toFixed(1)} h); ` +
          'a retry arriving after its event was deleted would be processed again',
      )
    }
  }
  return warnings
}
