import { describe, expect, it } from 'vitest'
import { type DecisionInput, decide, type Step } from '../../src/outbound/decision.js'

const base = { roundAttempts: 1, maxAttempts: 4, approved: false }
type Row = [string, Omit<DecisionInput, keyof typeof base> & Partial<typeof base>, Step]

// The decision table, row by row: every rule lives in decide(), none beside it.
const table: Row[] = [
  ['first call', { effect: 'irreversible', last: undefined }, { kind: 'execute', closeLast: null }],
  [
    'idempotent unknown, under the cap',
    { effect: 'idempotent', last: { status: 'unknown', hasUndoRef: false } },
    { kind: 'execute', closeLast: null },
  ],
  [
    'idempotent in flight at the cap',
    { effect: 'idempotent', last: { status: 'in_flight', hasUndoRef: false }, roundAttempts: 4 },
    { kind: 'exhausted', closeLast: 'unknown' },
  ],
  [
    'compensable unknown with an undo reference',
    { effect: 'compensable', last: { status: 'unknown', hasUndoRef: true } },
    { kind: 'undo', closeLast: null },
  ],
  [
    'compensable unknown without an undo reference',
    { effect: 'compensable', last: { status: 'unknown', hasUndoRef: false } },
    { kind: 'needs_reconciliation', reason: 'unknown_without_undo_ref', closeLast: null },
  ],
  [
    'compensable in flight without an undo reference (never sent)',
    { effect: 'compensable', last: { status: 'in_flight', hasUndoRef: false } },
    { kind: 'execute', closeLast: 'not_sent' },
  ],
  [
    'compensable in flight with an undo reference',
    { effect: 'compensable', last: { status: 'in_flight', hasUndoRef: true } },
    { kind: 'undo', closeLast: 'unknown' },
  ],
  [
    'compensable, every attempt undone at the cap',
    { effect: 'compensable', last: { status: 'compensated', hasUndoRef: true }, roundAttempts: 4 },
    { kind: 'failed', reason: 'all 4 attempts were undone' },
  ],
  [
    'irreversible unknown',
    { effect: 'irreversible', last: { status: 'unknown', hasUndoRef: false } },
    { kind: 'needs_reconciliation', reason: 'unknown_outcome', closeLast: null },
  ],
  [
    'irreversible unknown, approved',
    { effect: 'irreversible', last: { status: 'in_flight', hasUndoRef: false }, approved: true },
    { kind: 'execute', closeLast: 'unknown' },
  ],
  [
    'undo failed',
    { effect: 'compensable', last: { status: 'undo_failed', hasUndoRef: true } },
    { kind: 'needs_reconciliation', reason: 'undo_failed', closeLast: null },
  ],
]

describe('decide(): the decision table', () => {
  it.each(table)('%s', (_name, input, expected) => {
    expect(decide({ ...base, ...input })).toEqual(expected)
  })
})
