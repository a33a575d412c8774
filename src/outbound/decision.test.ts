import { describe, expect, it } from 'vitest'
import type { AttemptStatus, EffectClass } from '../db/outbound-schema.js'
import { type DecisionInput, decide, type Step } from './decision.js'

type Row = [
  effect: EffectClass,
  last: AttemptStatus | 'none',
  hasUndoRef: boolean,
  roundAttempts: number,
  approved: boolean,
  expected: Step,
]

const MAX_ATTEMPTS = 3

// The decision table, row by row: what the ledger does next for each effect class and newest attempt.
const TABLE: Row[] = [
  ['idempotent', 'none', false, 0, false, { kind: 'execute', closeLast: null }],
  ['irreversible', 'none', false, 0, false, { kind: 'execute', closeLast: null }],
  ['compensable', 'not_sent', false, 1, false, { kind: 'execute', closeLast: null }],
  // A worker died mid-call: the attempt may have landed.
  ['idempotent', 'in_flight', false, 1, false, { kind: 'execute', closeLast: 'unknown' }],
  ['idempotent', 'unknown', false, 1, false, { kind: 'execute', closeLast: null }],
  ['idempotent', 'unknown', false, MAX_ATTEMPTS, false, { kind: 'exhausted', closeLast: null }],
  ['idempotent', 'in_flight', false, MAX_ATTEMPTS, false, { kind: 'exhausted', closeLast: 'unknown' }],
  // Compensable: no undo reference in flight means the call was never sent (the reference comes first).
  ['compensable', 'in_flight', false, 1, false, { kind: 'execute', closeLast: 'not_sent' }],
  ['compensable', 'in_flight', true, 1, false, { kind: 'undo', closeLast: 'unknown' }],
  ['compensable', 'unknown', true, 1, false, { kind: 'undo', closeLast: null }],
  ['compensable', 'compensated', true, 1, false, { kind: 'execute', closeLast: null }],
  [
    'compensable',
    'compensated',
    true,
    MAX_ATTEMPTS,
    false,
    { kind: 'failed', reason: `all ${MAX_ATTEMPTS} attempts were undone` },
  ],
  [
    'compensable',
    'undo_failed',
    true,
    1,
    false,
    { kind: 'needs_reconciliation', reason: 'undo_failed', closeLast: null },
  ],
  ['compensable', 'undo_failed', true, 1, true, { kind: 'undo', closeLast: null }],
  // Irreversible: never re-executed on its own; only a human's approval sends it once more.
  [
    'irreversible',
    'in_flight',
    false,
    1,
    false,
    { kind: 'needs_reconciliation', reason: 'unknown_outcome', closeLast: 'unknown' },
  ],
  [
    'irreversible',
    'unknown',
    false,
    1,
    false,
    { kind: 'needs_reconciliation', reason: 'unknown_outcome', closeLast: null },
  ],
  ['irreversible', 'unknown', false, 1, true, { kind: 'execute', closeLast: null }],
]

function input(row: Row): DecisionInput {
  const [effect, last, hasUndoRef, roundAttempts, approved] = row
  return {
    effect,
    last: last === 'none' ? undefined : { status: last, hasUndoRef },
    roundAttempts,
    maxAttempts: MAX_ATTEMPTS,
    approved,
  }
}

describe('decide()', () => {
  it.each(TABLE)('%s, newest attempt %s (undo ref %s, %i of the round, approved %s)', (...row) => {
    expect(decide(input(row))).toEqual(row[5])
  })

  it.each(['succeeded', 'rejected'] as const)(
    'refuses a settled newest attempt (%s): such an operation is never leased',
    (status) => {
      expect(() =>
        decide(input(['idempotent', status, false, 1, false, { kind: 'execute', closeLast: null }])),
      ).toThrow(/settled attempt/)
    },
  )
})
