import type { EventContext, HandlerResult, TransactionContext } from '../queue/handler.js'
import { traceIdIn } from '../tracing.js'
import type { InvokeOutcome } from './outcomes.js'
import type { Tool } from './tools.js'

// What a handler registered in code is given: the worker's context of the attempt (src/queue/
// handler.ts) and `invoke`, the outbound ledger under the event's key (eventInvoker in ledger.ts).

/** `ctx.invoke`'s signature. */
export type Invoke = <A, R>(tool: Tool<A, R>, step: string, args: A) => Promise<InvokeOutcome<R>>

/** What a handler is given for one attempt at one event. */
export interface HandlerContext extends TransactionContext {
  /**
   * Calls a tool through the outbound ledger under the key `<source>:<event id>:<step>`: every
   * redelivery and retry of this event reaches the same operation, so its effect class decides
   * whether anything is sent again. Its writes are not part of `tx`: they commit on their own.
   */
  invoke: Invoke
}

// biome-ignore lint/suspicious/noConfusingVoidType: lets `async () => {}` be a handler that reports nothing
export type EventHandler = (context: HandlerContext) => Promise<HandlerResult | undefined | void>

/** The attempt an invoke is made in: the event's identity, the run, the trace. */
export interface EventRun {
  source: string
  eventId: string
  /** `<event row id>/<attempt>`: observability only. */
  runId: string
  /** The attempt's trace (tracing on), recorded on the operations it invokes: observability only. */
  traceId?: string | undefined
}

/** Builds `invoke` for one attempt of one event (eventInvoker in ledger.ts). */
export type EventInvoker = (
  event: EventRun & {
    /** Parts of the key between the event id and the step: a route's are `route` and its id. */
    scope?: readonly string[]
  },
) => Invoke

/** The run of an attempt's context. */
export function eventRunOf(context: EventContext): EventRun {
  return {
    source: context.source,
    eventId: context.eventId,
    runId: `${context.eventRowId}/${context.attempt}`,
    traceId: traceIdIn(context.trace),
  }
}
