import type { Transaction } from '../db/client.js'
import type { OperationRow } from '../db/operation-rows.js'
import type { Logger } from '../logger.js'
import type { InvokeOutcome } from '../outbound/outcomes.js'
import type { Tool } from '../outbound/tools.js'
import type { TraceScope } from '../tracing.js'

/** What a handler is given for one attempt at one event. */
export interface HandlerContext {
  /** The event's row in the ledger (inbound_events.id). */
  eventRowId: string
  source: string
  eventId: string
  eventType: string | null
  /** The parsed body. */
  event: unknown
  /** The exact bytes received. */
  raw: Buffer
  /** The headers kept on the row (signature and provider metadata). */
  headers: Readonly<Record<string, string>>
  /** 1 for the first attempt; counts crashed attempts too. */
  attempt: number
  /**
   * The transaction that marks the event DONE. Writes made through it commit with that mark or not
   * at all, so they happen exactly once per event however often the handler is re-run.
   */
  tx: Transaction
  /** Aborted when the attempt runs out of time; the transaction is rolled back then. */
  signal: AbortSignal
  logger: Logger
  /**
   * Calls a tool through the outbound ledger under the key `<source>:<event id>:<step>`: every
   * redelivery and retry of this event reaches the same operation, so its effect class decides
   * whether anything is sent again. Its writes are not part of `tx`: they commit on their own.
   */
  invoke<A, R>(tool: Tool<A, R>, step: string, args: A, options?: InvokeOptions<R>): Promise<InvokeOutcome<R>>
  /**
   * The worker's span of this attempt, to start child spans under (OpenTelemetry); undefined when
   * tracing is off or the attempt is not sampled.
   */
  trace?: TraceScope | undefined
}

export interface InvokeOptions<R> {
  /**
   * This call is the event's last step: its success also marks the event DONE, in the same
   * statement, with the attempt facts `last` takes from the result, and the worker writes no DONE
   * of its own. For a direct handler that does nothing after this call (the configured forward); a
   * code handler's DONE commits with its transaction, so there it changes nothing.
   */
  last?: (result: R) => HandlerResult
}

/**
 * The worker's attempt at an event, for a last step's success to mark DONE with it (`InvokeOptions`).
 * `done` is set once that mark committed.
 */
export interface EventAttempt {
  eventRowId: string
  leaseToken: string
  attempt: number
  startedAt: Date
  done: boolean
  /** The forward operation the lease claimed, for the last step to take instead of claiming it. */
  claimed?: OperationRow | undefined
  /**
   * Called once the last step's call has succeeded, before its success and the DONE mark are
   * written: the event's handler is over, so the worker gives its slot to the next event while the
   * write commits.
   */
  lastCallSucceeded?: (() => void) | undefined
}

/**
 * Builds `ctx.invoke` for one attempt of one event: the service binds it to the outbound ledger, so
 * the worker needs nothing of outbound/.
 */
export type EventInvoker = (event: {
  source: string
  eventId: string
  runId: string
  /** Parts of the key between the event id and the step: a route's are `route` and its id. */
  scope?: readonly string[]
  /** Given by the worker for a direct handler: lets a last step mark the event DONE. */
  attempt?: EventAttempt
  /** The attempt's trace (tracing on), recorded on the operations it invokes: observability only. */
  traceId?: string | undefined
}) => HandlerContext['invoke']

/** Optional facts about the attempt, recorded on its attempt row. */
export interface HandlerResult {
  responseStatus?: number
  responseExcerpt?: string
}

// biome-ignore lint/suspicious/noConfusingVoidType: lets `async () => {}` be a handler that reports nothing
export type EventHandler = (context: HandlerContext) => Promise<HandlerResult | undefined | void>

/** What a handler that writes nothing of its own in the ledger's database is given: all but `tx`. */
export type DirectContext = Omit<HandlerContext, 'tx'>

/**
 * How the worker runs a source's handler. A code handler gets `tx` and runs inside the transaction
 * that writes DONE. A direct handler (the configured forward) records its effect through the outbound
 * ledger and writes nothing else, so no transaction is held while it waits on the network, and its
 * DONE mark is written in one statement with those of other events finishing at the same time.
 */
export type SourceHandler = (
  | { kind: 'transactional'; run: EventHandler }
  | {
      kind: 'direct'
      run: (context: DirectContext) => Promise<HandlerResult>
      /**
       * The configured forward alone: the worker's lease claims the event's forward operation in its
       * own statement (src/db/events.ts), with this lease on it, and the forward's invoke takes it.
       */
      forwardLeaseMs?: number
    }
) & {
  /**
   * Called once the event's DONE has committed (an ordering key hands its line to the next event).
   * It must not throw: the event is done whatever it does.
   */
  done?: (eventRowId: string) => Promise<void>
}

/**
 * The handler could not start its work yet (the forward is leased by a worker that died mid-call):
 * the event runs again after `retryAfterMs`, and this try does not use up one of its attempts.
 */
export class RetryLaterError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs: number,
    /** Logged at debug: the wait is reported elsewhere (an ordering key's summary per minute). */
    readonly quiet = false,
  ) {
    super(message)
    this.name = 'RetryLaterError'
  }
}

/** A failed attempt that carries what the destination answered. */
export class HandlerError extends Error {
  constructor(
    message: string,
    readonly details: HandlerResult = {},
  ) {
    super(message)
    this.name = 'HandlerError'
  }
}
