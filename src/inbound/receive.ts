import { createHash } from 'node:crypto'
import type { Span } from '@opentelemetry/api'
import type { Source } from '../config/config.js'
import type { RejectionCode } from '../config/verifier.js'
import { type ClaimBatcher, MissingPartitionError } from '../db/claims.js'
import { isLedgerReadOnly, isLedgerUnavailable } from '../db/client.js'
import { storableText } from '../db/text.js'
import type { HereLease } from '../queue/worker.js'
import { traceparentOf } from '../tracing.js'
import type { Backpressure, Refusal } from './backpressure.js'
import { buildDedupKey } from './dedup-key.js'
import { orderingKeysOf } from './ordering-keys.js'

export type ReceiveOutcome =
  /** `startedHere`: the claim leased the row and this process's worker runs it; no job is needed. */
  | { kind: 'accepted'; id: string; startedHere: boolean }
  | { kind: 'duplicate'; id: string }
  | { kind: 'replay'; id: string }
  | { kind: 'conflict'; id: string; eventId: string }
  | { kind: 'rejected'; code: RejectionCode; message: string }
  | { kind: 'handshake'; body: unknown }
  | { kind: 'ledger_unavailable'; cause: unknown }
  /** The ledger answers but refuses writes (a standby, a database made read-only). */
  | { kind: 'ledger_read_only'; cause: unknown }
  /** No ledger partition for now (the partition keeper has not run): nothing was written. */
  | { kind: 'ledger_partition_missing'; cause: MissingPartitionError }
  /** The ledger cannot keep up: refused before the claim, so nothing was written (429, Retry-After). */
  | { kind: 'busy'; refusal: Refusal }

export interface ReceiveDependencies {
  claims: ClaimBatcher
  /** Absent: no bound (an app built without one). */
  backpressure?: Backpressure
  /**
   * A place in this process's worker for the row about to be claimed (Worker.reserveHere), or
   * undefined; absent in a process that does not work what it claims.
   */
  reserveHere?: () => HereLease | undefined
  now?: () => number
}

/**
 * Verify, then claim. Nothing reaches the ledger before the signature and timestamp check out, and
 * `accepted`/`duplicate` are returned only once the row is committed: a provider stops retrying on
 * a 2xx, so an answer given before the commit could lose the event.
 */
export async function receiveDelivery(
  deps: ReceiveDependencies,
  source: Source,
  raw: Buffer,
  headers: Record<string, string>,
  /** The receive's span (the no-op one when tracing is off): its steps are events on it. */
  span?: Span,
): Promise<ReceiveOutcome> {
  const verification = source.verifier.verify({ raw, headers, now: (deps.now ?? Date.now)() })
  if (verification.kind !== 'verified') return verification
  span?.addEvent('verified')
  const eventId =
    source.config.dedupKey === undefined
      ? verification.eventId
      : buildDedupKey(source.config.dedupKey, {
          providerEventId: verification.eventId,
          eventType: verification.eventType,
          event: verification.event,
          headers,
        })
  if (typeof eventId !== 'string') return eventId
  // After the signature (a sender with a bad secret keeps getting 401), before anything is written.
  const refusal = deps.backpressure?.refusal()
  if (refusal !== undefined) return { kind: 'busy', refusal }
  const payloadHash = createHash('sha256').update(raw).digest('hex')
  // The raw bytes are stored as they came (bytea); the text derived from them is made storable here,
  // so a NUL in a signed `type` can fail neither this delivery nor its batch neighbours. The event id
  // needs nothing: verifiers accept only visible ASCII.
  const event = {
    source: source.config.id,
    eventId,
    eventType: verification.eventType === null ? null : storableText(verification.eventType),
    payloadHash,
    body: raw,
    headers: storableHeaders({ ...pickHeaders(headers), ...verification.keptHeaders }),
    bodyKey: source.dedupOnBody ? payloadHash : null,
    orderingKeys: orderingKeysOf(source.config, verification.event),
    // Kept with the row, so the worker's span of this event continues the receive's trace.
    traceParent: span === undefined ? null : (traceparentOf(span) ?? null),
  }
  const here = deps.reserveHere?.()
  try {
    const claim = await deps.claims.claim(here === undefined ? event : { ...event, lease: here.lease })
    // Started before the answer is written: the row is committed, and its lease is this process's.
    if (claim.kind === 'accepted' && claim.leased !== undefined) here?.run(claim.leased)
    else here?.release()
    // The claim is one statement shared by the deliveries of a moment; it committed before it answered.
    if (span?.isRecording()) {
      span.addEvent('claim committed', {
        'hookledger.claim': claim.kind,
        'hookledger.event_row_id': claim.id,
      })
    }
    switch (claim.kind) {
      case 'accepted':
        return { kind: 'accepted', id: claim.id, startedHere: claim.leased !== undefined }
      case 'conflict':
        return { ...claim, eventId: event.eventId }
      default:
        return claim
    }
  } catch (error) {
    // A claim given up on (its deadline) may still commit later: its row then waits for the relay's
    // orphan recovery once its lease has run out, as a row of a process that died would.
    here?.release()
    if (isLedgerReadOnly(error)) return { kind: 'ledger_read_only', cause: error }
    if (isLedgerUnavailable(error)) return { kind: 'ledger_unavailable', cause: error }
    if (error instanceof MissingPartitionError) return { kind: 'ledger_partition_missing', cause: error }
    throw error
  }
}

/** Headers kept beside the signature ones: enough to replay the delivery with its original meaning. */
const GENERAL_HEADERS = ['content-type', 'user-agent'] as const

function storableHeaders(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, storableText(value)]))
}

function pickHeaders(headers: Record<string, string>): Record<string, string> {
  const kept: Record<string, string> = {}
  for (const name of GENERAL_HEADERS) {
    const value = headers[name]
    if (value !== undefined) kept[name] = value
  }
  return kept
}
