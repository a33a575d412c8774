import type postgres from 'postgres'
import type { Config } from '../config/config.js'
import { providerRetryHorizonSeconds } from '../inbound/verifiers/index.js'
import type { Logger } from '../logger.js'

export interface Retention {
  /** One pass over every source; returns how many rows it deleted. Exposed for tests. */
  sweep(): Promise<number>
  stop(): Promise<void>
}

/**
 * Deletes DONE events older than their source's `retentionDays`, in bounded batches. PENDING,
 * PROCESSING and FAILED rows are never deleted: they are work still owed (or owed a human look).
 * Sources no longer in the config are left alone rather than guessed at.
 */
export function startRetention(deps: { sql: postgres.Sql; config: Config; logger: Logger }): Retention {
  const { intervalMs, batchSize } = deps.config.file.retention
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()

  const sweep = async () => {
    let total = 0
    for (const [id, source] of deps.config.sources) {
      for (;;) {
        // SKIP LOCKED: several workers sweeping at once split the rows instead of queueing on them.
        const deleted = await deps.sql`
          delete from inbound_events where id in (
            select id from inbound_events
            where source = ${id} and status = 'done'
              and received_at < now() - ${source.config.retentionDays} * interval '1 day'
            order by received_at
            limit ${batchSize}
            for update skip locked)`
        total += deleted.count
        if (deleted.count < batchSize || stopped) break
      }
    }
    if (total > 0) deps.logger.info({ deleted: total }, 'retention deleted expired DONE events')
    return total
  }

  const loop = () => {
    if (stopped) return
    running = sweep()
      .catch((error: unknown) => deps.logger.warn({ err: error }, 'retention sweep failed; retrying later'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, intervalMs)
      })
  }
  timer = setTimeout(loop, Math.min(intervalMs, 60_000))

  return {
    sweep,
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}

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
