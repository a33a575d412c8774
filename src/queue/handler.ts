import type { Transaction } from '../db/client.js'
import type { LeasedEvent } from '../db/events.js'
import type { Logger } from '../logger.js'
import type { TraceScope } from '../tracing.js'

// The worker's contract with a source's handler. A handler in code sees more: `ctx.invoke`, the
// outbound ledger under the event's key (src/outbound/event-handler.ts), which the layers above
// the worker bind (src/delivery/source-handlers.ts), so the worker knows nothing of outbound/.

/** What the worker gives a source's handler for one attempt at one event. */
export interface EventContext {
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
  /** Aborted when the attempt runs out of time; the transaction is rolled back then. */
  signal: AbortSignal
  logger: Logger
  /**
   * The worker's span of this attempt, to start child spans under (OpenTelemetry); undefined when
   * tracing is off or the attempt is not sampled.
   */
  trace?: TraceScope | undefined
}

/** An attempt's context inside the transaction that marks the event DONE. */
export interface TransactionContext extends EventContext {
  /**
   * The transaction that marks the event DONE. Writes made through it commit with that mark or not
   * at all, so they happen exactly once per event however often the handler is re-run.
   */
  tx: Transaction
}

/** Optional facts about the attempt, recorded on its attempt row. */
export interface HandlerResult {
  responseStatus?: number
  responseExcerpt?: string
}

/**
 * How the worker runs a source's handler. A transactional one (a handler in code) runs inside the
 * transaction that writes DONE. A direct one (a source's own forward, the routes) writes nothing
 * itself, or records its effects through the outbound ledger (the routes), so no transaction is held
 * while it waits on the network, and its DONE mark is written in one statement with those of other
 * events finishing at the same time.
 */
export type SourceHandler = (
  | {
      kind: 'transactional'
      // biome-ignore lint/suspicious/noConfusingVoidType: a handler in code may report nothing
      run: (context: TransactionContext) => Promise<HandlerResult | undefined | void>
    }
  | {
      kind: 'direct'
      /**
       * `releaseSlot` frees the event's handler slot once its work is over and only DONE is left to
       * write: a forward's, as soon as its call succeeded, since the DONE takes as long again as the
       * call (~7 ms each at concurrency 32, with every slot taken and rows waiting).
       */
      run: (context: EventContext, releaseSlot: () => void) => Promise<HandlerResult>
    }
) & {
  /**
   * Runs before the handler on every attempt, outside its transaction and its deadline: a step the
   * event needs whatever its handler does (an evidence rule's settlement, src/inbound/evidence.ts),
   * committed on its own, so a failing handler never holds it back. Its error fails the attempt as
   * the handler's would.
   */
  before?: (event: LeasedEvent, trace: TraceScope | undefined) => Promise<void>
  /**
   * Called once the event's DONE has committed (an ordering key hands its line to the next event).
   * It must not throw: the event is done whatever it does.
   */
  done?: (eventRowId: string) => Promise<void>
}

/**
 * The handler could not start its work yet (a destination's limit or open circuit, a disabled route,
 * a route's operation leased by a worker that died mid-call): the event runs again after
 * `retryAfterMs`, and this try does not use up one of its attempts.
 */
export class RetryLaterError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs: number,
    /** Logged at debug: the wait is reported elsewhere (an ordering key's summary per minute). */
    readonly quiet = false,
    /**
     * What this try sent and was answered before it had to wait (a 410 Gone that disabled the
     * forward): recorded as the event's attempt with outcome `paused` and this error's message,
     * which spends no attempt.
     */
    readonly sent?: HandlerResult,
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
