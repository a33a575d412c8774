import { sql } from 'drizzle-orm'
import {
  bigint,
  bigserial,
  boolean,
  check,
  customType,
  index,
  integer,
  jsonb,
  pgEnum,
  pgSequence,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core'

const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'bytea' })

const timestamptz = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: 'date' })

/** One row per database. Its id names the deployment's queues, so deployments sharing a Redis never meet. */
export const deployment = pgTable('deployment', {
  id: uuid('id').primaryKey().defaultRandom(),
  createdAt: timestamptz('created_at').notNull().defaultNow(),
})

export const eventStatus = pgEnum('event_status', ['pending', 'processing', 'done', 'failed'])
export type EventStatus = (typeof eventStatus.enumValues)[number]

/** Numbers events in the order their claims were inserted: the "received order" of ordering keys. */
export const inboundEventsReceivedSeq = pgSequence('inbound_events_received_seq')

// Partitioned by RANGE of id, a period per partition (migration 0018, src/db/ledger-periods.ts), and
// each partition stored with fillfactor 50 (migration 0017): pgTable can express neither. Fillfactor
// keeps room on each page for the row's updates, so a new version lands beside the old one and is
// logged as the bytes that differ.
export const inboundEvents = pgTable(
  'inbound_events',
  {
    /** A version 7 UUID: its first 48 bits are the milliseconds of the claim, which pick the partition. */
    id: uuid('id').primaryKey().default(sql`hookledger_uuid_v7(now())`),
    source: text('source').notNull(),
    eventId: text('event_id').notNull(),
    eventType: text('event_type'),
    /** sha256 of the raw body, hex: tells a retry (same hash) from a conflicting reuse of the id. */
    payloadHash: text('payload_hash').notNull(),
    // The body itself is in inbound_event_payloads, written once: every status change rewrites this
    // row, which without the body is less than half the size (migration 0020).
    /**
     * payload_hash again, set only for sources that dedup on the body (their event id is not signed):
     * a captured delivery resent under a fresh id meets the original on the unique index below.
     */
    bodyKey: text('body_key'),
    headers: jsonb('headers').$type<Record<string, string>>().notNull(),
    status: eventStatus('status').notNull().default('pending'),
    /** Attempts of the current round; a replay starts a new round at 0 (the worker's cap counts this). */
    attempts: integer('attempts').notNull().default(0),
    /** How many times a person replayed this event; the round its attempts in event_attempts belong to. */
    replays: integer('replays').notNull().default(0),
    lastError: text('last_error'),
    receivedAt: timestamptz('received_at').notNull().defaultNow(),
    /**
     * The order in which events were received, also within one claim batch (whose rows share
     * received_at). Null for rows received before migration 0009; those order by received_at.
     */
    receivedSeq: bigint('received_seq', { mode: 'number' }).default(
      sql`nextval('inbound_events_received_seq')`,
    ),
    /** Set once a job for the row is known to be in the queue; the relay looks for rows without it. */
    enqueuedAt: timestamptz('enqueued_at'),
    /**
     * The job that carried the row when it was first enqueued: a batch's `evts-<uuid>` or the row's own
     * `evt-<uuid>` (src/queue/jobs.ts). The relay's orphan pass asks the queue about it as well as
     * about the row's own job.
     */
    jobId: text('job_id'),
    nextAttemptAt: timestamptz('next_attempt_at'),
    processedAt: timestamptz('processed_at'),
    leaseToken: uuid('lease_token'),
    leaseUntil: timestamptz('lease_until'),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
    /**
     * How the row was authenticated: `webhook` by the delivery's signature, `backfill` by the
     * provider's API answering an authenticated list call (src/backfill/). A backfilled row's body is
     * the API's rendering of the event, not the bytes a webhook would carry.
     */
    origin: text('origin', { enum: ['webhook', 'backfill'] })
      .notNull()
      .default('webhook'),
    /**
     * The W3C traceparent of the receive's span, written by the claim when tracing is on: the
     * worker's span of the event continues that trace (src/tracing.ts). Observability only.
     */
    traceParent: text('trace_parent'),
  },
  (t) => [
    // Not unique: a partitioned table's unique index must hold its partition key. The claim's arbiter
    // is inbound_event_keys; this serves lookups by event id (the admin page, backfill).
    index('inbound_events_source_event_id_idx').on(t.source, t.eventId),
    // With id: a bulk replay's chunk starts right after the last row it flipped (migration 0016).
    index('inbound_events_status_received_id_idx').on(t.status, t.receivedAt, t.id),
    // The admin page's keyset paging, newest first, over all statuses (received_at, id), and its
    // overview's time windows: the other columns let those read the index alone (migration 0004).
    index('inbound_events_received_overview_idx').on(t.receivedAt, t.id, t.source, t.status, t.processedAt),
    index('inbound_events_unqueued_idx')
      .on(t.receivedAt)
      .where(sql`${t.enqueuedAt} is null and ${t.status} = 'pending'`),
    // Added NOT VALID by migration 0008 (no scan of the rows before it, all 'webhook' by default).
    check('inbound_events_origin_check', sql`${t.origin} in ('webhook', 'backfill')`),
  ],
)

/**
 * Every period of the inbound ledger (migration 0018): inbound_events and the five tables below keyed
 * by its row id (payloads, attempts, replays, routes, ordering keys) each have one partition per
 * period, named `<table>_<suffix>`, for the ids of [starts, ends). Each child partition's foreign
 * key names its own period's events partition, so that one period drops without a look at any
 * other; pgTable cannot declare those, nor the partitioning.
 */
export const ledgerPeriods = pgTable(
  'ledger_periods',
  {
    starts: timestamptz('starts').primaryKey(),
    ends: timestamptz('ends').notNull(),
    suffix: text('suffix').notNull().unique(),
  },
  (t) => [check('ledger_periods_order_check', sql`${t.ends} > ${t.starts}`)],
)

/** Every generation of inbound_event_keys, each its partition `inbound_event_keys_<suffix>`. */
export const inboundKeyGenerations = pgTable(
  'inbound_key_generations',
  {
    starts: timestamptz('starts').primaryKey(),
    ends: timestamptz('ends').notNull(),
    suffix: text('suffix').notNull().unique(),
  },
  (t) => [check('inbound_key_generations_order_check', sql`${t.ends} > ${t.starts}`)],
)

/**
 * The claim's arbiter (src/db/claims.ts): one row per claimed event and key generation, partitioned
 * by generation and kept for `retention.dedupWindowDays` at least, whether or not the event's period
 * is still there. A duplicate is answered from here, not from inbound_events.
 */
export const inboundEventKeys = pgTable(
  'inbound_event_keys',
  {
    generation: timestamptz('generation').notNull(),
    source: text('source').notNull(),
    eventId: text('event_id').notNull(),
    bodyKey: text('body_key'),
    eventRowId: uuid('event_row_id').notNull(),
    payloadHash: text('payload_hash').notNull(),
    origin: text('origin', { enum: ['webhook', 'backfill'] }).notNull(),
  },
  // The generation last: a claim's look into the other generations descends on the key.
  (t) => [
    uniqueIndex('inbound_event_keys_source_event_id_uq').on(t.source, t.eventId, t.generation),
    uniqueIndex('inbound_event_keys_source_body_key_uq')
      .on(t.source, t.bodyKey, t.generation)
      .where(sql`${t.bodyKey} is not null`),
  ],
)

/**
 * The exact bytes received, one row per event, written by the claim in the same statement as the
 * event and never updated, so that an event can be re-verified, inspected and replayed. Apart from
 * inbound_events, whose row every status change rewrites, so that the body is written once
 * (migration 0020). Its GIN index serves the admin page's payload search (`data.object.customer =
 * cus_123`) on the body parsed as JSON: an expression computed once, at the insert, since the row
 * is never updated. A body that is not JSON (hookledger_body_json gives NULL, migration 0004) has no
 * entry in it.
 */
export const inboundEventPayloads = pgTable(
  'inbound_event_payloads',
  {
    eventRowId: uuid('event_row_id').primaryKey(),
    body: bytea('body').notNull(),
  },
  // jsonb_path_ops: one hashed entry per leaf path, serving `@>` for any JSON path of any body.
  (t) => [
    index('inbound_event_payloads_body_idx').using(
      'gin',
      sql`hookledger_body_json(${t.body}) jsonb_path_ops`,
    ),
  ],
)

/** One row per handler run: what happened, and what the destination answered. */
export const eventAttempts = pgTable(
  'event_attempts',
  {
    id: bigserial('id', { mode: 'number' }).notNull(),
    eventRowId: uuid('event_row_id').notNull(),
    attempt: integer('attempt').notNull(),
    /** The replay round (0 = as received): attempt numbers restart with each replay, history stays. */
    replay: integer('replay').notNull().default(0),
    outcome: text('outcome', { enum: ['done', 'error'] }).notNull(),
    error: text('error'),
    responseStatus: integer('response_status'),
    responseExcerpt: text('response_excerpt'),
    startedAt: timestamptz('started_at').notNull(),
    finishedAt: timestamptz('finished_at').notNull().defaultNow(),
  },
  // One index: an event's attempts are read by its id alone (migration 0021).
  (t) => [primaryKey({ columns: [t.eventRowId, t.id] })],
)

/** Who replayed a FAILED event and when: the audit of a person's re-run of a handler. */
export const eventReplays = pgTable(
  'event_replays',
  {
    id: bigserial('id', { mode: 'number' }).notNull(),
    eventRowId: uuid('event_row_id').notNull(),
    /** The round this replay started (inbound_events.replays after it). */
    replay: integer('replay').notNull(),
    by: text('by').notNull(),
    previousAttempts: integer('previous_attempts').notNull(),
    previousError: text('previous_error'),
    at: timestamptz('at').notNull().defaultNow(),
  },
  // One index: an event's replays are read by its id alone, a handful of rows sorted after the read
  // (migration 0023).
  (t) => [primaryKey({ columns: [t.eventRowId, t.id] })],
)

/**
 * Deliveries that reused an event id with a different body. The original row stays untouched; these
 * rows are the evidence (a provider bug or tampering) and the count.
 */
export const inboundConflicts = pgTable(
  'inbound_conflicts',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    source: text('source').notNull(),
    eventId: text('event_id').notNull(),
    payloadHash: text('payload_hash').notNull(),
    originalPayloadHash: text('original_payload_hash').notNull(),
    receivedAt: timestamptz('received_at').notNull().defaultNow(),
  },
  (t) => [
    index('inbound_conflicts_source_event_idx').on(t.source, t.eventId),
    index('inbound_conflicts_received_idx').on(t.receivedAt),
  ],
)

/**
 * Admin page logins. The cookie names a row; logout revokes it, so a copied cookie stops working
 * at once instead of lasting out its 12 hours.
 */
export const adminSessions = pgTable(
  'admin_sessions',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull(),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    expiresAt: timestamptz('expires_at').notNull(),
    revokedAt: timestamptz('revoked_at'),
  },
  (t) => [index('admin_sessions_expires_idx').on(t.expiresAt)],
)

/**
 * The dedup key definition each source's event ids were made under (src/inbound/dedup-key.ts). A
 * changed definition under the same version would silently merge or split events, so start-up
 * compares the config with this row and refuses that; a higher version is recorded here instead.
 */
export const sourceDedupKeys = pgTable('source_dedup_keys', {
  source: text('source').primaryKey(),
  version: integer('version').notNull(),
  definition: jsonb('definition').$type<unknown>().notNull(),
  recordedAt: timestamptz('recorded_at').notNull().defaultNow(),
})

/**
 * Per source with backfill on: how far the provider's list has been read, the unfinished sweep a
 * bounded pass stopped in, and the lease that lets one process at a time run a pass.
 */
export const backfillCursors = pgTable('backfill_cursors', {
  source: text('source').primaryKey(),
  /** Everything the provider created before this was listed by a completed sweep. */
  watermark: timestamptz('watermark'),
  /** The lower bound of a sweep a pass left unfinished (its page bound or an error stopped it). */
  sweepSince: timestamptz('sweep_since'),
  /** When that sweep began: its watermark once it completes. */
  sweepStartedAt: timestamptz('sweep_started_at'),
  /** The provider's own page cursor to continue that sweep from (Stripe's starting_after, GitHub's cursor). */
  sweepResume: text('sweep_resume'),
  leaseToken: uuid('lease_token'),
  leaseUntil: timestamptz('lease_until'),
  lastPassAt: timestamptz('last_pass_at'),
  lastError: text('last_error'),
  /** The code of the BackfillError that stopped the last pass (the backfillStuck alert reads it). */
  lastErrorCode: text('last_error_code'),
  updatedAt: timestamptz('updated_at').notNull().defaultNow(),
})

/** GitHub deliveries hookledger asked to redeliver: each delivery (by its guid) is asked for once. */
export const backfillRedeliveries = pgTable(
  'backfill_redeliveries',
  {
    source: text('source').notNull(),
    /** X-GitHub-Delivery: the ledger's event id for GitHub, shared by a delivery and its redeliveries. */
    guid: text('guid').notNull(),
    /** The delivery whose redelivery was asked for (GitHub's numeric id, as text). */
    deliveryId: text('delivery_id').notNull(),
    event: text('event'),
    requestedAt: timestamptz('requested_at').notNull().defaultNow(),
  },
  (t) => [uniqueIndex('backfill_redeliveries_source_guid_uq').on(t.source, t.guid)],
)

export const routeDeliveryStatus = pgEnum('route_delivery_status', [
  'pending',
  'done',
  'failed',
  'waiting',
  'paused',
])
export type RouteDeliveryStatus = (typeof routeDeliveryStatus.enumValues)[number]

/**
 * Where each route an event matched stands. A route marked done is never run again for this event
 * (a retry or replay runs only the routes that are not), and the admin page shows one row per route.
 * An event that matched no route has none.
 */
export const eventRoutes = pgTable(
  'event_routes',
  {
    eventRowId: uuid('event_row_id').notNull(),
    routeId: text('route_id').notNull(),
    status: routeDeliveryStatus('status').notNull(),
    /** Attempts at this route that ran (a delivery that had to wait is not one). */
    attempts: integer('attempts').notNull().default(0),
    lastError: text('last_error'),
    responseStatus: integer('response_status'),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.eventRowId, t.routeId] })],
)

/**
 * Each ordered event's key per scope (the source's own orderingKey under route_id '', each route's
 * under its id), written with the claim, so "the oldest unfinished event of this key before me" is
 * one probe of the partial index instead of a containment test on every earlier event's body
 * (src/db/ordering.ts). `held` goes false once the event is done for the scope.
 */
export const eventOrderingKeys = pgTable(
  'event_ordering_keys',
  {
    eventRowId: uuid('event_row_id').notNull(),
    routeId: text('route_id').notNull(),
    source: text('source').notNull(),
    /** sha256 of the pointer and the RFC 8785 JSON of the value there (orderingKeyHash). */
    keyHash: bytea('key_hash').notNull(),
    /** received_seq; for an event claimed before it existed, a negative number in received_at order. */
    seq: bigint('seq', { mode: 'number' }).notNull(),
    held: boolean('held').notNull().default(true),
  },
  (t) => [
    primaryKey({ columns: [t.eventRowId, t.routeId] }),
    index('event_ordering_keys_line_idx').on(t.source, t.routeId, t.keyHash, t.seq).where(sql`${t.held}`),
  ],
)

/**
 * Routes a destination turned away for good (410 Gone, as Standard Webhooks defines it): their
 * deliveries wait, none is FAILED, until a person re-enables the route.
 */
export const disabledRoutes = pgTable(
  'disabled_routes',
  {
    source: text('source').notNull(),
    routeId: text('route_id').notNull(),
    reason: text('reason').notNull(),
    disabledAt: timestamptz('disabled_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.source, t.routeId] })],
)
