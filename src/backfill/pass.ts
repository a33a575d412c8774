import type postgres from 'postgres'
import type { BackfillProvider } from '../config/backfill.js'
import type { Source, SourceBackfill } from '../config/config.js'
import { ConfigError } from '../config/errors.js'
import {
  completeSweep,
  dropSweep,
  releasePassLease,
  saveSweepProgress,
  takePassLease,
} from '../db/backfill-cursors.js'
import { LeaseLostError } from '../db/lease.js'
import { orderingKeysOf } from '../inbound/ordering-keys.js'
import type { Logger } from '../logger.js'
import { BackfillError } from './errors.js'
import { githubBackfill } from './github.js'
import { createProviderClient, type ProviderClient, UNAVAILABLE_ATTEMPTS } from './provider-client.js'
import { stripeBackfill } from './stripe.js'
import type { BackfillReport, ProviderBackfill, SweepContext } from './sweep.js'

const PROVIDERS: Record<BackfillProvider, ProviderBackfill> = {
  stripe: stripeBackfill,
  github: githubBackfill,
}

export interface PassDependencies {
  sql: postgres.Sql
  logger: Logger
  /** Called for each row the pass claimed, after its commit (the service enqueues it; else the relay does). */
  onAccepted?: (eventRowId: string) => void
  now?: () => number
  sleep?: (ms: number) => Promise<void>
  /** Shutdown: the pass stops after the page it is on, its progress saved. */
  signal?: AbortSignal
}

/**
 * Webhooks and the provider's list can race: an event created just before a sweep began may show in
 * the list a moment later. Each sweep reads this far below the previous one's start; what it finds
 * twice is a duplicate of the ledger's row, which costs one index probe.
 */
const OVERLAP_MS = 5 * 60_000
/**
 * How long a pass holds its source; the loop also logs a pass still running after this as stuck.
 * Every finished page extends the lease, so only a pass that stopped making progress loses it. It
 * outlasts the longest rate-limit wait a pass sits out, and a request's every attempt run to its
 * deadline, plus a few slow requests.
 */
export const passLeaseMs = (backfill: SourceBackfill) =>
  Math.max(
    5 * 60_000,
    backfill.config.maxWaitSeconds * 1000 + 2 * 60_000,
    UNAVAILABLE_ATTEMPTS * backfill.config.requestTimeoutSeconds * 1000 + 2 * 60_000,
  )

/**
 * One bounded backfill pass for one source, under the source's lease (one pass at a time across
 * processes). Without `since` it continues the cursor: an unfinished sweep where it stopped, else a
 * new sweep from the last completed one's start (less a small overlap), never older than
 * lookbackHours. With `since` it is a one-off sweep from there, which moves the cursor forward only
 * when it covered at least what the next automatic pass would have read.
 */
export async function runBackfillPass(
  deps: PassDependencies,
  source: Source,
  options: { since?: Date } = {},
): Promise<BackfillReport> {
  const id = source.config.id
  const backfill = source.backfill
  if (backfill === undefined) throw new ConfigError(`source '${id}' has no backfill block in the config`)
  const credential = backfill.credential
  if (credential === undefined) {
    throw new ConfigError(
      `source '${id}': backfill.credential: environment variable ${backfill.credentialName} is not set`,
    )
  }
  const provider = PROVIDERS[backfill.provider]
  const now = deps.now ?? Date.now
  const lease = await takePassLease(deps.sql, id, passLeaseMs(backfill))
  if (!('token' in lease)) {
    throw new BackfillError(
      'pass_running',
      `a backfill pass for source '${id}' is running in another process (its lease ends ${lease.heldUntil.toISOString()})`,
    )
  }
  const { token, cursor } = lease
  const startedAt = new Date(now())
  const lookbackStart = new Date(startedAt.getTime() - backfill.config.lookbackHours * 3_600_000)
  const automaticSince =
    cursor.watermark === null
      ? lookbackStart
      : new Date(Math.max(lookbackStart.getTime(), cursor.watermark.getTime() - OVERLAP_MS))
  const explicit = options.since !== undefined
  const resumed = explicit ? null : cursor.sweep
  const since = options.since ?? resumed?.since ?? automaticSince
  const sweepStartedAt = resumed?.startedAt ?? startedAt
  const report: BackfillReport = {
    source: id,
    provider: backfill.provider,
    since,
    resumedAfter: resumed?.resume ?? null,
    pages: 0,
    listed: 0,
    claimed: [],
    duplicates: 0,
    conflicts: [],
    redelivered: [],
    alreadyRequested: 0,
    alreadyInLedger: 0,
    complete: false,
  }
  const context: SweepContext = {
    source: id,
    orderingKeys: (event) => orderingKeysOf(source.config, event),
    sql: deps.sql,
    client: providerClient(provider, backfill, credential, deps),
    config: backfill.config,
    since,
    resume: resumed?.resume ?? null,
    report,
    onAccepted: deps.onAccepted ?? (() => {}),
    stopping: () => deps.signal?.aborted === true,
    // A one-off sweep keeps no resume point of its own: the cursor belongs to the automatic passes.
    pageDone: (resume) =>
      saveSweepProgress(
        deps.sql,
        id,
        token,
        explicit ? null : { since, startedAt: sweepStartedAt, resume },
        passLeaseMs(backfill),
      ),
  }
  try {
    report.complete = await provider.sweep(context)
    if (report.complete && since.getTime() <= automaticSince.getTime()) {
      await completeSweep(deps.sql, id, token, sweepStartedAt)
    }
    await releasePassLease(deps.sql, id, token, null)
  } catch (thrown) {
    // Another pass took the lease over: the cursor is its to write now, so this one stops where it
    // is, as any pass stopped by its provider does (a report with the code, never a stack).
    const error =
      thrown instanceof LeaseLostError
        ? new BackfillError(
            'lease_lost',
            `the pass made no progress for longer than its lease (${Math.round(passLeaseMs(backfill) / 60_000)} min) ` +
              `and another pass took source '${id}' over; this one stopped without writing more`,
          )
        : thrown
    if (!(error instanceof BackfillError)) {
      await releasePassLease(deps.sql, id, token, {
        code: null,
        message: error instanceof Error ? error.message : String(error),
      }).catch(() => {})
      throw error
    }
    let message = error.message
    if (error.code === 'request_rejected' && resumed !== null) {
      // A refused resume point would refuse every later pass the same way.
      await dropSweep(deps.sql, id, token)
      message += '; the unfinished sweep was dropped and the next pass starts it again'
    }
    report.error = { code: error.code, message }
    // A lost lease is the new holder's to release; its token no longer matches here anyway.
    if (error.code !== 'lease_lost')
      await releasePassLease(deps.sql, id, token, { code: error.code, message })
  }
  deps.logger[report.error === undefined ? 'info' : 'warn'](
    {
      source: id,
      provider: report.provider,
      pages: report.pages,
      listed: report.listed,
      claimed: report.claimed.length,
      duplicates: report.duplicates,
      redelivered: report.redelivered.length,
      complete: report.complete,
      ...(report.error === undefined ? {} : { code: report.error.code }),
    },
    report.error === undefined ? 'backfill pass finished' : `backfill pass stopped: ${report.error.message}`,
  )
  return report
}

function providerClient(
  provider: ProviderBackfill,
  backfill: SourceBackfill,
  credential: string,
  deps: PassDependencies,
): ProviderClient {
  return createProviderClient({
    ...provider.api,
    headers: {
      authorization: `Bearer ${credential}`,
      'user-agent': 'hookledger-backfill',
      ...provider.api.headers,
    },
    baseUrl: backfill.apiBaseUrl,
    credentialName: backfill.credentialName,
    maxWaitMs: backfill.config.maxWaitSeconds * 1000,
    timeoutMs: backfill.config.requestTimeoutSeconds * 1000,
    maxResponseBytes: backfill.config.maxResponseBytes,
    sleep: deps.sleep ?? ((ms: number) => abortableSleep(ms, deps.signal)),
    ...(deps.now === undefined ? {} : { now: deps.now }),
  })
}

/** A wait that shutdown cuts short, so a rate-limit wait never holds up stopping the process. */
function abortableSleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        resolve()
      },
      { once: true },
    )
  })
}
