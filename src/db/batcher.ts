import { isLedgerUnavailable } from './client.js'

/** Runs many callers' items in one statement; answers in the items' order, one answer per item. */
export type BatchRunner<I, O> = (items: readonly I[]) => Promise<readonly O[]>

export interface Batcher<I, O> {
  run(item: I): Promise<O>
  /** Items gathering or in a statement now: how far behind the ledger this batcher is. */
  size(): number
}

/**
 * How long the first item of a batch waits for others, by default. Events in flight reach each
 * statement at different moments, so a batch cut at the end of one event-loop turn held ~7 of a
 * worker's 32; waiting 1 ms gathers several turns' worth and took the drain from ~1 statement per
 * event to ~0.3, PostgreSQL's CPU per event down by a third and the worker's by up to a quarter
 * (`npm run bench`, README). An event pays it once per statement, a few ms in all, against a
 * forward's HTTP round trip.
 */
const GATHER_MS = 1

export interface BatcherOptions {
  /** Items per statement at most; a full batch goes at once. */
  maxBatch?: number
  gatherMs?: number
}

/**
 * Gathers the items of concurrent callers that arrive within `gatherMs` into one statement and one
 * commit (group commit by hand), so the ledger's cost per item falls with load; each caller still
 * resumes only after the statement holding its own item has committed. Only a batcher under load
 * (a statement running, or one ended within the window) makes its items wait for a window; an item
 * that finds it idle goes at the end of its event-loop turn, so a trickle of events pays no window
 * per statement (`npm run bench`'s trickle: p50 from receive to forward 6.9 → 4.7 ms).
 *
 * One bad item must never fail its neighbours: when a batch fails for any reason but a lost ledger,
 * each item is run again on its own, so only the item that cannot be stored gets the error.
 */
export function createBatcher<I, O>(
  runBatch: BatchRunner<I, O>,
  { maxBatch = 64, gatherMs = GATHER_MS }: BatcherOptions = {},
): Batcher<I, O> {
  type Waiting = { item: I; resolve: (result: O) => void; reject: (error: unknown) => void }
  let waiting: Waiting[] = []
  let running = 0
  // The window of the batch now gathering; a batch that fills up goes at once and ends it, so the
  // next batch gets a whole window of its own instead of the rest of this one.
  let window: NodeJS.Timeout | undefined
  // A batch begun while this batcher is idle goes at the end of the turn instead.
  let turnEnd: NodeJS.Immediate | undefined
  // When its last statement ended: one that ended within the window still counts as busy, since
  // under load its callers' next items follow it within that time.
  let lastEndedAt = Number.NEGATIVE_INFINITY

  const settle = async (batch: readonly Waiting[]) => {
    try {
      const results = await runBatch(batch.map((entry) => entry.item))
      for (const [index, entry] of batch.entries()) {
        if (index < results.length) entry.resolve(results[index] as O)
        else entry.reject(new Error('a batched statement left an item without an answer'))
      }
    } catch (error) {
      if (batch.length === 1 || isLedgerUnavailable(error)) {
        for (const entry of batch) entry.reject(error)
        return
      }
      await Promise.all(batch.map((entry) => settle([entry])))
    }
  }

  const flush = () => {
    clearTimeout(window)
    window = undefined
    clearImmediate(turnEnd)
    turnEnd = undefined
    const batch = waiting
    waiting = []
    if (batch.length === 0) return
    running += batch.length
    void settle(batch).finally(() => {
      running -= batch.length
      lastEndedAt = performance.now()
    })
  }

  return {
    run(item) {
      return new Promise<O>((resolve, reject) => {
        waiting.push({ item, resolve, reject })
        if (waiting.length === 1) {
          // Under load (a statement running, or one just ended) the items gather for a window; an
          // idle batcher has nothing to gather behind, and an event arriving alone (most webhook
          // traffic) pays no window per statement: its batch takes what its own turn brought.
          if (running > 0 || performance.now() - lastEndedAt < gatherMs) window = setTimeout(flush, gatherMs)
          else turnEnd = setImmediate(flush)
        } else if (waiting.length >= maxBatch) flush()
      })
    },
    size: () => waiting.length + running,
  }
}
