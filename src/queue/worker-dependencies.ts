import type postgres from 'postgres'
import type { ConfigFile } from '../config/config.js'
import type { Batcher } from '../db/batcher.js'
import type { Database } from '../db/client.js'
import type { LeaseRequest, LeaseResult } from '../db/events.js'
import type { Settled, Settlement } from '../db/operation-batches.js'
import type { Failpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import type { Metrics } from '../metrics.js'
import type { Tracing } from '../tracing.js'
import type { JobQueue, QueueBackend } from './backend.js'
import type { SourceHandler } from './handler.js'
import type { ProcessEventData } from './jobs.js'

// What the worker's parts share: the worker (worker.ts) takes jobs and leases rows, a leased row's
// run (run-leased.ts) calls its handler and records how it ended.

export interface WorkerDependencies {
  backend: QueueBackend
  /** The queue the worker takes from: a row of a batch job that must run later gets a job of its own. */
  queue: JobQueue<ProcessEventData>
  db: Database
  sql: postgres.Sql
  handlers: ReadonlyMap<string, SourceHandler>
  settings: ConfigFile['worker']
  logger: Logger
  metrics: Metrics
  failpoints: Failpoints
  /** OpenTelemetry (src/tracing.ts); absent: off. */
  tracing?: Tracing | undefined
}

/**
 * The statements every event makes, each shared by the events that reach it within a millisecond.
 * A direct handler's DONE goes in the statement of the outbound ledger's successes (operation-batches.ts).
 */
export interface Batches {
  lease: Batcher<LeaseRequest, LeaseResult>
  settle: Batcher<Settlement, Settled>
}
