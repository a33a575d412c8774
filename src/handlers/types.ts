import type { Transaction } from '../db/client.js'
import type { Logger } from '../logger.js'

/** What a handler is given for one attempt at one event. */
export interface HandlerContext {
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
}

/** Optional facts about the attempt, recorded on its attempt row. */
export interface HandlerResult {
  responseStatus?: number
  responseExcerpt?: string
}

// biome-ignore lint/suspicious/noConfusingVoidType: lets `async () => {}` be a handler that reports nothing
export type EventHandler = (context: HandlerContext) => Promise<HandlerResult | undefined | void>

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
