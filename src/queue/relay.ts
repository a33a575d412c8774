import { and, asc, inArray, isNotNull, isNull, lt, sql } from 'drizzle-orm'
import type { ConfigFile } from '../config/config.js'
import type { Database } from '../db/client.js'
import { inboundEvents } from '../db/schema.js'
import type { Logger } from '../logger.js'
import type { Enqueuer } from './enqueuer.js'

export interface RelayDependencies {
  db: Database
  enqueuer: Enqueuer
  settings: ConfigFile['relay']
  logger: Logger
}

export interface Relay {
  /** One pass; returns how many rows it handed to the queue. Exposed for tests. */
  tick(): Promise<number>
  stop(): Promise<void>
}

const BATCH = 500
const ORPHAN_BATCH = 100

/**
 * Every committed row ends DONE or FAILED, even when Redis was down at receive time or the process
 * died between the commit and the enqueue: the relay finds such rows in the ledger and enqueues them.
 * Several relays at once are safe, because a job's id is derived from its row and BullMQ adds it once.
 */
export function startRelay(deps: RelayDependencies): Relay {
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<unknown> = Promise.resolve()
  let failing = false

  const tick = async () => (await enqueueUnqueued(deps)) + (await recoverOrphans(deps))

  const loop = () => {
    if (stopped) return
    running = tick()
      .then(() => {
        if (failing) deps.logger.info('relay recovered')
        failing = false
      })
      .catch((error: unknown) => {
        // Redis or Postgres down: expected during outages; say it once, not every second.
        if (!failing) deps.logger.warn({ err: error }, 'relay pass failed; retrying')
        failing = true
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, deps.settings.intervalMs)
      })
  }
  timer = setTimeout(loop, 0)

  return {
    tick,
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
    },
  }
}

/** Rows committed a while ago whose job was never confirmed in the queue. */
async function enqueueUnqueued(deps: RelayDependencies): Promise<number> {
  const rows = await deps.db
    .select({ id: inboundEvents.id })
    .from(inboundEvents)
    .where(
      and(
        sql`${inboundEvents.status} = 'pending'`,
        isNull(inboundEvents.enqueuedAt),
        lt(inboundEvents.receivedAt, sql`now() - ${`${deps.settings.graceMs} milliseconds`}::interval`),
      ),
    )
    .orderBy(asc(inboundEvents.receivedAt))
    .limit(BATCH)
  if (rows.length === 0) return 0
  await deps.enqueuer.add(rows.map((row) => row.id))
  deps.logger.info({ count: rows.length }, 'relay enqueued committed rows that had no job')
  return rows.length
}

/**
 * Rows that should be moving but have been quiet for a long time: their job may be gone (Redis lost
 * its data, or BullMQ gave up on it while Postgres was down). Each one is checked against the queue
 * and re-added when it has no live job.
 */
async function recoverOrphans(deps: RelayDependencies): Promise<number> {
  const quietSince = sql`now() - ${`${deps.settings.orphanAfterMs} milliseconds`}::interval`
  const rows = await deps.db
    .select({ id: inboundEvents.id })
    .from(inboundEvents)
    .where(
      and(
        inArray(inboundEvents.status, ['pending', 'processing']),
        isNotNull(inboundEvents.enqueuedAt),
        // greatest() skips nulls: quiet means no retry is due, no lease is live, nothing changed lately.
        sql`greatest(${inboundEvents.nextAttemptAt}, ${inboundEvents.leaseUntil}, ${inboundEvents.updatedAt}) < ${quietSince}`,
      ),
    )
    .orderBy(asc(inboundEvents.updatedAt))
    .limit(ORPHAN_BATCH)
  const readded = await deps.enqueuer.requeue(rows.map((row) => row.id))
  if (rows.length > 0) {
    // Checked now: look at these rows again only after another quiet period.
    await deps.db
      .update(inboundEvents)
      .set({ updatedAt: sql`now()` })
      .where(
        inArray(
          inboundEvents.id,
          rows.map((row) => row.id),
        ),
      )
  }
  if (readded > 0) deps.logger.warn({ count: readded }, 'relay re-enqueued rows whose job was lost')
  return readded
}
