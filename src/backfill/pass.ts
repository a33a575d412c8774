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
import type { OrderingKeyRow } from '../db/ordering.js'
import { orderingKeysOf } from '../inbound/ordering-keys.js'
import type { Logger } from '../logger.js'
import { BackfillError, type BackfillErrorCode } from './errors.js'
import { githubSweep } from './github.js'
import { createProviderClient, type ProviderClient, UNAVAILABLE_ATTEMPTS } from './provider-client.js'
import { stripeSweep } from './stripe.js'

/** What one pass did, for the log and for `hookledger backfill`. */
export interface BackfillReport {
  source: string
  provider: BackfillProvider
  /** The lower bound the provider's list was read down to. */
  since: Date
  /** The provider page cursor an unfinished sweep was resumed from. */
  resumedAfter: string | null
  pages: number
  /** Events (Stripe) or deliveries (GitHub) listed. */
  listed: number
  /** Stripe: event ids claimed by this pass, now in the ledger as backfilled rows. */
  claimed: string[]
  /** Stripe: events the ledger already held (a webhook or an earlier pass came first). */
  duplicates: number
  /** Stripe: event ids already held with another backfilled body (recorded in inbound_conflicts). */
  conflicts: string[]
  /** GitHub: deliveries (by guid) whose redelivery this pass asked for. */
  redelivered: string[]
  /** GitHub: failed deliveries whose redelivery an earlier pass asked for already. */
  alreadyRequested: number
  /** GitHub: failed deliveries whose event the ledger holds anyway (answered too late, say). */
  alreadyInLedger: number
  /** The sweep reached its lower bound; false when the page bound or an error stopped it first. */
  complete: boolean
  /** Why the pass stopped early, if it did. */
  error?: { code: BackfillErrorCode; message: string }
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

/** What a provider's sweep gets: where to list from, and how to record each page it finished. */
export interface SweepContext {
  source: string
  /** The event's keys in the source's ordered scopes, written with its claim (orderingKeysOf). */
  orderingKeys: (event: unknown) => OrderingKeyRow[]
  sql: postgres.Sql
  client: ProviderClient
  config: SourceBackfill['config']
  since: Date
  resume: string | null
  report: BackfillReport
  onAccepted: (eventRowId: string) => void
  /** The pages before `resume` are handled: a later pass may start after it. */
  pageDone(resume: string): Promise<void>
  /** Whether the process is shutting down: the sweep then stops before its next page. */
  stopping(): boolean
}

/**
 * Webhooks and the provider's list can race: an event created just before a sweep began may show in
 * the list a moment later. Each sweep reads this far below the previous one's start; what it finds
 * twice is a duplicate of the ledger's row, which costs one index probe.
 */
const OVERLAP_MS = 5 * 60_000
/**
 * The pass lease; every finished page extends it, so only a pass that stopped making progress loses
 * it. It outlasts the longest rate-limit wait a pass sits out, and a request's every attempt run to
 * its deadline, plus a few slow requests.
 */
/** How long a pass holds its source; the loop also logs a pass still running after this as stuck. */
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
    client: providerClient(backfill, credential, deps),
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
    report.complete = await (backfill.provider === 'stripe' ? stripeSweep(context) : githubSweep(context))
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
  backfill: SourceBackfill,
  credential: string,
  deps: PassDependencies,
): ProviderClient {
  const common = {
    baseUrl: backfill.apiBaseUrl,
    credentialName: backfill.credentialName,
    maxWaitMs: backfill.config.maxWaitSeconds * 1000,
    timeoutMs: backfill.config.requestTimeoutSeconds * 1000,
    maxResponseBytes: backfill.config.maxResponseBytes,
    sleep: deps.sleep ?? ((ms: number) => abortableSleep(ms, deps.signal)),
    ...(deps.now === undefined ? {} : { now: deps.now }),
  }
  if (backfill.provider === 'stripe') {
    return createProviderClient({
      ...common,
      name: 'Stripe',
      headers: { authorization: `Bearer ${credential}`, 'user-agent': 'hookledger-backfill' },
      // Stripe names no wait on a 429; its docs advise an exponential backoff, started here.
      defaultRateLimitWaitMs: 1000,
    })
  }
  return createProviderClient({
    ...common,
    name: 'GitHub',
    headers: {
      authorization: `Bearer ${credential}`,
      accept: 'application/vnd.github+json',
      'x-github-api-version': '2022-11-28',
      'user-agent': 'hookledger-backfill',
    },
    // GitHub's docs: a secondary rate limit with no retry-after is waited out for at least a minute.
    defaultRateLimitWaitMs: 60_000,
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
