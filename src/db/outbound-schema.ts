import { sql } from 'drizzle-orm'
import {
  bigserial,
  index,
  integer,
  jsonb,
  pgEnum,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core'

const timestamptz = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: 'date' })

export const effectClass = pgEnum('effect_class', ['idempotent', 'compensable', 'irreversible'])
export type EffectClass = (typeof effectClass.enumValues)[number]

/**
 * The source document's states plus the ones its gate needs:
 * - in_progress: a lease is (or was) held; an expired lease is the crash window.
 * - completed: the effect happened; result_json is replayed to every repeat.
 * - compensated: the effect happened and its undo ran (a saga abort).
 * - needs_reconciliation: unknown whether the effect happened; never collapsed into failed.
 * - awaiting_approval: reconciliation could not settle it; a human decides.
 * - retry_approved: a human approved one more execution of exactly these arguments.
 * - exhausted: an idempotent tool's bounded retries ran out; re-executing stays safe.
 * - failed: definitely did not happen (a definite rejection, or every attempt undone).
 * - abandoned: a human gave up on it; nothing runs it again.
 */
export const operationStatus = pgEnum('operation_status', [
  'in_progress',
  'completed',
  'compensated',
  'needs_reconciliation',
  'awaiting_approval',
  'retry_approved',
  'exhausted',
  'failed',
  'abandoned',
])
export type OperationStatus = (typeof operationStatus.enumValues)[number]

/**
 * The source document's operation_record: one row per intended action, identified by its key. Stored
 * with fillfactor 50 (migration 0022; pgTable cannot express it), so a success's new version lands on
 * the claim's page and is logged as the bytes that differ.
 */
export const operations = pgTable(
  'operations',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    /** Stable across retries of one intended action; made by the runtime, never by a model. */
    operationKey: text('operation_key').notNull(),
    tool: text('tool').notNull(),
    effectClass: effectClass('effect_class').notNull(),
    /** sha256 of the RFC 8785 canonical JSON of args: the same key with other arguments is a conflict. */
    payloadHash: text('payload_hash').notNull(),
    args: jsonb('args').$type<unknown>().notNull(),
    status: operationStatus('status').notNull().default('in_progress'),
    leaseToken: uuid('lease_token'),
    leaseUntil: timestamptz('lease_until'),
    /** Attempts ever started (each one an in-flight row in operation_attempts). */
    attempts: integer('attempts').notNull().default(0),
    /** Attempts in the current bounded round; the cap applies to this, a new round starts after approval. */
    roundAttempts: integer('round_attempts').notNull().default(0),
    resultJson: jsonb('result_json').$type<unknown>(),
    downstreamId: text('downstream_id'),
    /** The undo of the latest attempt, committed before that attempt's call went out. */
    undoRef: jsonb('undo_ref').$type<unknown>(),
    lastError: text('last_error'),
    /** What reconciliation (or a human) found in the external system. */
    evidence: jsonb('evidence').$type<unknown>(),
    /** When the reconciliation job is due; a sweep re-enqueues rows whose job was lost. */
    reconcileAt: timestamptz('reconcile_at'),
    // Observability only: these change when work is retried, so they never decide anything.
    runId: text('run_id'),
    traceId: text('trace_id'),
    toolCallId: text('tool_call_id'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
    completedAt: timestamptz('completed_at'),
  },
  (t) => [
    // The claim: concurrent invokes of one key race on this index, never on a prior SELECT. With
    // text_pattern_ops it also finds an event's operations by key prefix (LIKE 'source:event:%')
    // under a non-C collation, so no second index on the key is written for every operation.
    uniqueIndex('operations_operation_key_uq').using('btree', t.operationKey.op('text_pattern_ops')),
    index('operations_status_updated_idx').on(t.status, t.updatedAt),
  ],
)

export const attemptStatus = pgEnum('attempt_status', [
  'in_flight',
  'succeeded',
  'rejected',
  'unknown',
  'not_sent',
  'compensated',
  'undo_failed',
])
export type AttemptStatus = (typeof attemptStatus.enumValues)[number]

/**
 * One row per call that may have gone out, committed before it went out. Stored with fillfactor 80
 * (migration 0022): room on its page for the attempt's HOT update.
 */
export const operationAttempts = pgTable(
  'operation_attempts',
  {
    /** A number of its own for each attempt row; the key is (operation_id, attempt) (migration 0021). */
    id: bigserial('id', { mode: 'number' }).notNull(),
    operationId: uuid('operation_id')
      .notNull()
      .references(() => operations.id, { onDelete: 'cascade' }),
    attempt: integer('attempt').notNull(),
    /** The idempotency key sent downstream: the operation key, or a new one after a compensation. */
    attemptKey: text('attempt_key').notNull(),
    status: attemptStatus('status').notNull().default('in_flight'),
    undoRef: jsonb('undo_ref').$type<unknown>(),
    error: text('error'),
    details: jsonb('details').$type<unknown>(),
    startedAt: timestamptz('started_at').notNull().defaultNow(),
    finishedAt: timestamptz('finished_at'),
  },
  (t) => [
    primaryKey({ name: 'operation_attempts_operation_id_attempt_pk', columns: [t.operationId, t.attempt] }),
  ],
)

export const approvalStatus = pgEnum('approval_status', ['pending', 'decided'])

/** A question to a human, with the evidence; at most one pending per operation. */
export const approvals = pgTable(
  'approvals',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    operationId: uuid('operation_id')
      .notNull()
      .references(() => operations.id, { onDelete: 'cascade' }),
    /** Whether the question is about the operation itself or about undoing it (a saga abort). */
    action: text('action', { enum: ['execute', 'undo'] }).notNull(),
    /** The arguments the approver is shown; a retry is bound to exactly these. */
    payloadHash: text('payload_hash').notNull(),
    reason: text('reason').notNull(),
    evidence: jsonb('evidence').$type<unknown>(),
    proposedAction: text('proposed_action', {
      enum: ['retry', 'record_success', 'abandon', 'investigate'],
    }).notNull(),
    status: approvalStatus('status').notNull().default('pending'),
    decision: text('decision', { enum: ['retry', 'record_success', 'abandon'] }),
    decidedBy: text('decided_by'),
    decidedAt: timestamptz('decided_at'),
    decisionEvidence: jsonb('decision_evidence').$type<unknown>(),
    note: text('note'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('approvals_one_pending_uq').on(t.operationId).where(sql`${t.status} = 'pending'`),
    index('approvals_status_created_idx').on(t.status, t.createdAt),
  ],
)

/** Append-only (a trigger refuses UPDATE and DELETE): every transition, with who and when. */
export const operationAudit = pgTable(
  'operation_audit',
  {
    /** The entries' order; the key is (operation_id, id), the one way they are read (migration 0021). */
    id: bigserial('id', { mode: 'number' }).notNull(),
    operationId: uuid('operation_id').notNull(),
    operationKey: text('operation_key').notNull(),
    event: text('event').notNull(),
    fromStatus: text('from_status'),
    toStatus: text('to_status'),
    actor: text('actor').notNull(),
    details: jsonb('details').$type<unknown>(),
    at: timestamptz('at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ name: 'operation_audit_operation_id_id_pk', columns: [t.operationId, t.id] })],
)

export const evidenceOutcome = pgEnum('evidence_outcome', ['succeeded', 'failed'])
export type EvidenceOutcome = (typeof evidenceOutcome.enumValues)[number]

/**
 * - pending: kept until the operation's outcome is unknown (the webhook beat the response).
 * - applied: it settled the operation (completed, or failed for a failure event).
 * - superseded: the operation settled otherwise first (its response arrived, a human decided).
 * - not_applicable: it may not settle the operation its key names (outside its rule's scope, an
 *   internal operation, or received before the operation was first claimed); kept as a hint.
 */
export const evidenceStatus = pgEnum('evidence_status', [
  'pending',
  'applied',
  'superseded',
  'not_applicable',
])

/**
 * What an inbound event says about an outbound operation (a provider's `payment_intent.succeeded`
 * carrying the operation key it was created with). One row per event, however many times a worker
 * sees it: the unique (source, event_id) index makes recording it idempotent, and applying it is one
 * conditional statement that also marks it applied, so it settles an operation at most once.
 */
export const operationEvidence = pgTable(
  'operation_evidence',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    source: text('source').notNull(),
    eventId: text('event_id').notNull(),
    eventType: text('event_type'),
    /** The inbound_events row it was read from (no foreign key: retention may delete the event first). */
    eventRowId: uuid('event_row_id').notNull(),
    /** No foreign key either: the event may name an operation this ledger has not (yet) seen. */
    operationKey: text('operation_key').notNull(),
    outcome: evidenceOutcome('outcome').notNull(),
    downstreamId: text('downstream_id'),
    /** For a failure event: the marker that said so (a decline code, a status). */
    failure: text('failure'),
    status: evidenceStatus('status').notNull().default('pending'),
    /** Why it did not settle its operation (not_applicable), for the person who decides it. */
    note: text('note'),
    /** The scope of the rule that read it (`settles`): null in rows kept from before scopes, which never apply. */
    settlesTools: text('settles_tools').array(),
    settlesKeyPrefixes: text('settles_key_prefixes').array(),
    /** When its event was received: evidence received before an operation's first claim cannot be about it. */
    eventReceivedAt: timestamptz('event_received_at'),
    operationId: uuid('operation_id'),
    receivedAt: timestamptz('received_at').notNull().defaultNow(),
    settledAt: timestamptz('settled_at'),
  },
  (t) => [
    uniqueIndex('operation_evidence_source_event_uq').on(t.source, t.eventId),
    // What the state machine asks when an outcome becomes unknown: pending evidence for this key.
    index('operation_evidence_pending_key_idx').on(t.operationKey, t.id).where(sql`${t.status} = 'pending'`),
  ],
)
