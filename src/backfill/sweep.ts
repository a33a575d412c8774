import type postgres from 'postgres'
import type { BackfillProvider } from '../config/backfill.js'
import type { SourceBackfill } from '../config/config.js'
import type { OrderingKeyRow } from '../db/ordering.js'
import type { BackfillErrorCode } from './errors.js'
import type { ProviderClient, ProviderClientOptions } from './provider-client.js'

// The contract between a pass (pass.ts: lease, cursor, report) and each provider's sweep
// (stripe.ts, github.ts: how its list is read and what is done with each item).

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

/** A provider the backfill can sweep: how its API is asked, and how its list is read. */
export interface ProviderBackfill {
  /** What its client needs besides the credential, which goes as a bearer token. */
  api: Pick<ProviderClientOptions, 'name' | 'headers' | 'defaultRateLimitWaitMs'>
  /** Lists from `context.since`, each finished page recorded; true when it reached that bound. */
  sweep(context: SweepContext): Promise<boolean>
}
