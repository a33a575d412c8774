import { setTimeout as sleep } from 'node:timers/promises'
import type { Database } from '../db/client.js'
import { findOperation } from '../db/operation-queries.js'
import type { OperationRow, OperationStatus } from '../db/operation-rows.js'

/** The longest one wait may last: below the usual 60 s idle timeout of proxies in front of the API. */
export const MAX_WAIT_MS = 55_000

const FIRST_LOOK_MS = 100
const LOOK_AT_MOST_EVERY_MS = 1_000

export type WaitResult =
  | { kind: 'not_found' }
  /** The status is no longer `from` (it may have moved on again since). */
  | { kind: 'changed'; op: OperationRow }
  /** The wait ended with the status still `from`. */
  | { kind: 'timed_out'; op: OperationRow }

export interface WaitOptions {
  timeoutMs: number
  /** The status the caller last saw; default: the status when the wait starts. */
  from?: OperationStatus | undefined
  signal?: AbortSignal | undefined
}

/**
 * Waits until an operation's status differs from `from` or the time is up. The status may change in
 * any process (a worker applying an event, a reconciler, a person deciding), so the ledger row is
 * read again at growing intervals (100 ms, doubling, at most every second), one indexed read each.
 */
export async function waitForOperation(db: Database, key: string, options: WaitOptions): Promise<WaitResult> {
  if (!Number.isInteger(options.timeoutMs) || options.timeoutMs < 0 || options.timeoutMs > MAX_WAIT_MS) {
    throw new RangeError(`a wait is 0 to ${MAX_WAIT_MS} ms`)
  }
  const deadline = Date.now() + options.timeoutMs
  let op = await findOperation(db, key)
  if (op === undefined) return { kind: 'not_found' }
  const from = options.from ?? op.status
  let interval = FIRST_LOOK_MS
  while (op.status === from) {
    const left = deadline - Date.now()
    if (left <= 0 || options.signal?.aborted === true) return { kind: 'timed_out', op }
    try {
      await sleep(Math.min(interval, left), undefined, { signal: options.signal })
    } catch {
      return { kind: 'timed_out', op } // the caller went away
    }
    interval = Math.min(interval * 2, LOOK_AT_MOST_EVERY_MS)
    const next = await findOperation(db, key)
    if (next === undefined) return { kind: 'not_found' } // deleted meanwhile (retention)
    op = next
  }
  return { kind: 'changed', op }
}
