import type postgres from 'postgres'
import { createBatcher } from './batcher.js'
import { postgresErrorCode, serverDeadlinesOutsideTransactions, withLedgerDeadline } from './client.js'
import type { LeasedEvent } from './events.js'
import type { OrderingKeyRow } from './ordering.js'

export interface NewEvent {
  source: string
  eventId: string
  eventType: string | null
  payloadHash: string
  body: Buffer
  headers: Record<string, string>
  /** payloadHash for a source that dedups on the body too (its event id is unsigned); else absent. */
  bodyKey?: string | null
  /** `backfill` for an event a backfill pass fetched from the provider's API; `webhook` when absent. */
  origin?: EventOrigin
  /** Its keys in its source's ordered scopes (orderingKeysOf), written with the row. */
  orderingKeys?: readonly OrderingKeyRow[]
  /** The W3C traceparent of the receive's span (tracing on); absent or null: none. */
  traceParent?: string | null
  /** Absent: the row is inserted PENDING, for a job (or the relay) to start. */
  lease?: ClaimLease
}

/**
 * The lease a claim writes on its new row, for this process's worker to run it at once
 * (Worker.reserveHere): the row is inserted PROCESSING with attempt 1 counted, as a lease would
 * have set it, so the row is written once before its run instead of inserted and then rewritten.
 */
export interface ClaimLease {
  token: string
  /** Recorded on the row (inbound_events.job_id), as a lease records the job that carried it. */
  jobId: string
  leaseMs: number
}

export type EventOrigin = 'webhook' | 'backfill'

export type ClaimResult =
  /** `leased`: the row as its claim leased it (the event had a `lease`), for the worker to run. */
  | { kind: 'accepted'; id: string; leased?: LeasedEvent }
  | { kind: 'duplicate'; id: string }
  | { kind: 'conflict'; id: string }
  /** Another event id, the same signed body as the row `id`: a captured delivery sent again. */
  | { kind: 'replay'; id: string }

const key = (source: string, eventId: string) => `${source}\u0000${eventId}`

/**
 * How close to a key generation's bounds a claim also writes its keys into the neighbouring
 * generation. It must outlast any claim statement (the ledger's statement timeout is far shorter):
 * two copies of one event claimed at the same time then always write into one common generation,
 * where its unique index makes one of them wait for the other.
 */
export const KEY_GENERATION_OVERLAP = '1 hour'

/**
 * The ledger has no partition for the claim's time (no period or no key generation covers now): the
 * partition keeper has not run for days. Nothing was written; the sender's retry may find them made.
 */
export class MissingPartitionError extends Error {
  constructor(what: string) {
    super(
      `the ledger has no ${what} for now: no worker or start has made them (doctor: ledger.partitions_short)`,
    )
    this.name = 'MissingPartitionError'
  }
}

/**
 * The claim, for any number of deliveries, in one transaction: each new key is inserted into
 * inbound_event_keys (ON CONFLICT DO NOTHING on its unique (source, event_id) and (source,
 * body_key) indexes), and the events whose keys went in are inserted in the same statement.
 * Concurrent deliveries of one event meet on those indexes, so exactly one is `accepted` and no
 * prior SELECT can race. The others then read the winner's hash to tell a retry (duplicate) from a
 * reuse of the id with another body (conflict, recorded as evidence).
 *
 * inbound_event_keys is partitioned into generations (migration 0018), and a unique index holds
 * within one generation only. So a key is written into the generation of the claim's time, and,
 * within KEY_GENERATION_OVERLAP of its bounds, into the neighbouring one too; and a key any other
 * live generation holds is a duplicate without an insert. A key that won one of its two generations
 * but lost the other lost the race: its row in the first is deleted before the commit.
 *
 * Only a claim inside an overlap can lose that way, so only there does the claim need a transaction
 * of its own (BEGIN, the claim, the delete, COMMIT): elsewhere, the claim is one statement that
 * commits alone, two round trips fewer. The statement itself tells which: asked to claim alone, it
 * writes nothing when its time falls in an overlap, and the claim is made again in a transaction.
 * The database's clock decides, not the process's.
 */
export async function claimEvents(
  sql: postgres.Sql,
  events: readonly NewEvent[],
  /** Told the transaction id that committed new rows, and how many (backpressure's exact count). */
  onInserted?: (xid: string, rows: number) => void,
): Promise<ClaimResult[]> {
  if (events.length === 0) return []
  // Arrays, one per column, unnested in order: the first delivery of a key in the batch wins. Bodies
  // travel as hex because postgres-js sends no bytea arrays.
  // The body goes to inbound_event_payloads in the same statement (every event has its row there),
  // and the ordering keys to event_ordering_keys, so a later event's head lookup finds this one.
  const keys = events.flatMap((e) =>
    (e.orderingKeys ?? []).map((k) => ({ source: e.source, eventId: e.eventId, ...k })),
  )
  // Alone first: every claim but those of the two hours around a generation's end. Not behind
  // PgBouncer, where only a transaction carries the server's statement_timeout, which bounds a
  // claim's run far below KEY_GENERATION_OVERLAP.
  const single = serverDeadlinesOutsideTransactions(sql)
    ? await inPartition(claimStatement(sql, events, keys, { alone: true }))
    : undefined
  const outcome =
    single !== undefined && single.generations === 1
      ? single
      : // In an overlap (the statement alone wrote nothing), or behind PgBouncer: in a transaction
        // that deletes the keys of the copies that lost one of their two generations before anyone
        // can see them.
        ((await inPartition(
          sql.begin(async (tx) => {
            const claimed = await claimStatement(tx, events, keys, { alone: false })
            await deleteLostKeys(
              tx,
              claimed.claimed.filter((row) => row.lost),
            )
            return claimed
          }),
        )) as ClaimOutcome)
  const inserted = outcome.claimed.filter((row): row is ClaimedRow => !row.lost)
  if (inserted.length > 0) onInserted?.(outcome.xid, inserted.length)
  const insertedRows = new Map(inserted.map((row) => [key(row.source, row.event_id), row]))

  // A key inserted by this statement is accepted for its first delivery in the batch only.
  const results: Array<ClaimResult | undefined> = []
  const unresolved: number[] = []
  for (const [index, event] of events.entries()) {
    const k = key(event.source, event.eventId)
    const row = insertedRows.get(k)
    if (row !== undefined) {
      insertedRows.delete(k)
      results[index] =
        event.lease === undefined
          ? { kind: 'accepted', id: row.id }
          : { kind: 'accepted', id: row.id, leased: leasedByClaim(event, row) }
    } else {
      unresolved.push(index)
    }
  }
  if (unresolved.length > 0) {
    const replayable = unresolved.flatMap((i) => {
      const event = events[i]
      const bodyKey = event?.bodyKey ?? null
      return event === undefined || bodyKey === null ? [] : [{ source: event.source, bodyKey }]
    })
    // From the keys, not the events: the key outlives its event's partition for the dedup window.
    const existing = await sql<
      Array<{
        id: string
        source: string
        event_id: string
        payload_hash: string
        body_key: string | null
        origin: EventOrigin
      }>
    >`
      select event_row_id as id, source, event_id, payload_hash, body_key, origin from inbound_event_keys
      where (source, event_id) in (
        select * from unnest(
          ${unresolved.map((i) => events[i]?.source ?? '')}::text[],
          ${unresolved.map((i) => events[i]?.eventId ?? '')}::text[]))
      or (source, body_key) in (
        select * from unnest(
          ${replayable.map((r) => r.source)}::text[],
          ${replayable.map((r) => r.bodyKey)}::text[]))
      order by generation`
    const byKey = new Map(existing.map((row) => [key(row.source, row.event_id), row]))
    const byBody = new Map(
      existing.flatMap((row) => (row.body_key === null ? [] : [[key(row.source, row.body_key), row.id]])),
    )
    const retry: number[] = []
    for (const index of unresolved) {
      const event = events[index]
      if (event === undefined) continue
      const original = byKey.get(key(event.source, event.eventId))
      const bodyKey = event.bodyKey ?? null
      const sameBody = bodyKey === null ? undefined : byBody.get(key(event.source, bodyKey))
      if (original === undefined && sameBody !== undefined) {
        results[index] = { kind: 'replay', id: sameBody }
      } else if (original === undefined) {
        retry.push(index) // deleted (retention) between the two statements: claim it again
      } else if (
        original.payload_hash === event.payloadHash ||
        original.origin !== (event.origin ?? 'webhook')
      ) {
        // A webhook and a backfilled copy of one event are two renderings of it (the signed bytes,
        // the API's JSON), so their bytes differ by nature: they meet on the provider's event id
        // alone, which both authenticate (the signature, the authenticated API call).
        results[index] = { kind: 'duplicate', id: original.id }
      } else {
        await sql`
          insert into inbound_conflicts (source, event_id, payload_hash, original_payload_hash)
          values (${event.source}, ${event.eventId}, ${event.payloadHash}, ${original.payload_hash})`
        results[index] = { kind: 'conflict', id: original.id }
      }
    }
    if (retry.length > 0) {
      const again = await claimEvents(
        sql,
        retry.flatMap((i) => events[i] ?? []),
        onInserted,
      )
      for (const [position, index] of retry.entries()) results[index] = again[position]
    }
  }
  return results.flatMap((result) => result ?? [])
}

/** What the claim statement answers: the generations it wrote into, its transaction, its rows. */
interface ClaimOutcome {
  generations: number
  xid: string
  /** `lost`: the row won one generation and lost the other (a claim in an overlap only). */
  claimed: Array<ClaimedRow | LostRow>
}

/** A row the claim's statement inserted (a key that won every generation it was written to). */
interface ClaimedRow {
  id: string
  source: string
  event_id: string
  lost: false
  received_at: string
}

/** A key that won one generation and lost the other: no row was inserted for it (so no received time). */
type LostRow = Omit<ClaimedRow, 'lost' | 'received_at'> & { lost: true; received_at: null }

/** A row its claim leased, as the worker's lease would have answered it (attempt 1). */
function leasedByClaim(event: NewEvent, { id, received_at: receivedAt }: ClaimedRow): LeasedEvent {
  return {
    id,
    source: event.source,
    eventId: event.eventId,
    eventType: event.eventType,
    body: event.body,
    headers: event.headers,
    attempts: 1,
    receivedAt: new Date(receivedAt),
    traceParent: event.traceParent ?? null,
  }
}

/**
 * The claim's statement (see claimEvents). `alone`: it commits by itself, so it must not write keys
 * into two generations (a loser's key could not be deleted before its commit): in an overlap it
 * writes nothing and answers the two generations, for the caller to claim again in a transaction.
 */
async function claimStatement(
  tx: postgres.Sql | postgres.TransactionSql,
  events: readonly NewEvent[],
  keys: ReadonlyArray<OrderingKeyRow & { source: string; eventId: string }>,
  { alone }: { alone: boolean },
): Promise<ClaimOutcome> {
  // One row whatever happened, so a ledger with no generation for now cannot pass for duplicates.
  // Each array of the events is passed as `(select $n::text[])`, as the lease, the settle, the fresh
  // operation claim and the enqueue mark pass theirs: behind the subquery the planner cannot see the
  // array's length. Passed plainly, a batch of one row looked cheaper planned for its own values than
  // with the cached plan, so PostgreSQL planned the statement again at every call: at batches of one
  // that was half of this claim's and of the settle's backend CPU (940 → 420 µs and 820 → 450 µs per
  // event, `STMT_CLAIM=1 STMT_BATCH=1 npx tsx bench/statement-cpu.ts`, which prints each statement's
  // generic and custom plan counts). At batches of 8 and of 100 nothing moved. The ordering keys'
  // arrays (orderingKeyWrites) need not be hidden: with them the claim keeps its generic plan too
  // (`STMT_ORDERED=1`: 1,995 generic plans of 2,000, 480-500 µs either way).
  const [outcome] = await tx<ClaimOutcome[]>`
    with input as materialized (
      select hookledger_uuid_v7(now()) as id, source, event_id, event_type, payload_hash, body, headers,
             body_key, origin, trace_parent, lease_token::uuid, lease_job, lease_ms::int, position
      from unnest(
        (select ${events.map((e) => e.source)}::text[]),
        (select ${events.map((e) => e.eventId)}::text[]),
        (select ${events.map((e) => e.eventType)}::text[]),
        (select ${events.map((e) => e.payloadHash)}::text[]),
        (select ${events.map((e) => e.body.toString('hex'))}::text[]),
        (select ${events.map((e) => JSON.stringify(e.headers))}::text[]),
        (select ${events.map((e) => e.bodyKey ?? null)}::text[]),
        (select ${events.map((e) => e.origin ?? 'webhook')}::text[]),
        (select ${events.map((e) => e.traceParent ?? null)}::text[]),
        (select ${events.map((e) => e.lease?.token ?? null)}::text[]),
        (select ${events.map((e) => e.lease?.jobId ?? null)}::text[]),
        (select ${events.map((e) => (e.lease === undefined ? null : String(e.lease.leaseMs)))}::text[])
      ) with ordinality as input(source, event_id, event_type, payload_hash, body, headers, body_key, origin,
                                 trace_parent, lease_token, lease_job, lease_ms, position)),
    written as (
      select starts from inbound_key_generations
      where starts <= now() + ${KEY_GENERATION_OVERLAP}::interval
        and ends > now() - ${KEY_GENERATION_OVERLAP}::interval),
    fresh as (
      select * from input i
      -- Alone, a claim in an overlap writes nothing (see claimStatement).
      where (not ${alone}::boolean or (select count(*) from written) = 1)
        and not exists (
          select 1 from inbound_event_keys k
          where k.source = i.source and k.event_id = i.event_id
            and k.generation <> all(array(select starts from written)))
        and (i.body_key is null or not exists (
          select 1 from inbound_event_keys k
          where k.source = i.source and k.body_key = i.body_key
            and k.generation <> all(array(select starts from written))))),
    keyed as (
      -- In ascending generation order, as every claim: two claims wait for each other on one
      -- generation only, never each on the other's.
      insert into inbound_event_keys (generation, source, event_id, body_key, event_row_id, payload_hash, origin)
      select w.starts, f.source, f.event_id, f.body_key, f.id, f.payload_hash, f.origin
      from fresh f cross join written w
      order by f.position, w.starts
      on conflict do nothing
      returning event_row_id),
    won as (
      select event_row_id as id, count(*) = (select count(*) from written) as whole
      from keyed group by event_row_id),
    new_rows as (
      -- A leased row (the event came with a lease) goes in PROCESSING, as leaseEvents would set it.
      insert into inbound_events (id, source, event_id, event_type, payload_hash, headers, body_key, origin,
                                  trace_parent, status, attempts, lease_token, lease_until, enqueued_at, job_id)
      select i.id, i.source, i.event_id, i.event_type, i.payload_hash, i.headers::jsonb, i.body_key, i.origin,
             i.trace_parent,
             case when i.lease_token is null then 'pending' else 'processing' end::event_status,
             case when i.lease_token is null then 0 else 1 end, i.lease_token,
             now() + i.lease_ms * interval '1 millisecond',
             case when i.lease_token is not null then now() end, i.lease_job
      from input i join won using (id)
      where won.whole
      order by i.position
      returning id, source, event_id, received_seq, received_at),
    payloads as (
      insert into inbound_event_payloads (event_row_id, body)
      select i.id, decode(i.body, 'hex') from input i join new_rows using (id)
      order by i.position)
    ${keys.length === 0 ? tx`` : orderingKeyWrites(tx, keys)}
    select (select count(*)::int from written) as generations, pg_current_xact_id()::text as xid,
           coalesce((select json_agg(json_build_object('id', i.id, 'source', i.source, 'event_id', i.event_id,
                                                       'lost', not won.whole, 'received_at', n.received_at))
                     from input i join won using (id) left join new_rows n using (id)), '[]') as claimed`
  if (outcome === undefined || outcome.generations === 0) {
    throw new MissingPartitionError('dedup key generation (inbound_key_generations)')
  }
  return outcome
}

/** Deletes the keys of claims that lost one of their two generations (see claimEvents). */
async function deleteLostKeys(tx: postgres.TransactionSql, lost: ClaimOutcome['claimed']): Promise<void> {
  if (lost.length === 0) return
  await tx`
    delete from inbound_event_keys k
    using unnest(${lost.map((row) => row.source)}::text[], ${lost.map((row) => row.event_id)}::text[],
                 ${lost.map((row) => row.id)}::uuid[]) as l(source, event_id, id)
    where k.source = l.source and k.event_id = l.event_id and k.event_row_id = l.id`
}

/** The claim `statement`, a row with no partition for its id said as MissingPartitionError. */
async function inPartition<T>(statement: Promise<T>): Promise<T> {
  try {
    return await statement
  } catch (error) {
    // 23514 check_violation, as PostgreSQL reports "no partition of relation … found for row".
    if (
      postgresErrorCode(error) === '23514' &&
      /no partition of relation/.test(String((error as Error).message))
    ) {
      throw new MissingPartitionError('ledger period (ledger_periods)')
    }
    throw error
  }
}

/**
 * The claimed rows' ordering keys. A key listed twice for one row (the same event id twice in the
 * batch) is taken from its first delivery, the one whose row was inserted.
 */
function orderingKeyWrites(
  sql: postgres.Sql | postgres.TransactionSql,
  keys: ReadonlyArray<OrderingKeyRow & { source: string; eventId: string }>,
) {
  return sql`, ordering_keys as (
      insert into event_ordering_keys (event_row_id, route_id, source, key_hash, seq)
      select distinct on (new_rows.id, k.route_id)
             new_rows.id, k.route_id, new_rows.source, decode(k.key_hash, 'hex'), new_rows.received_seq
      from new_rows join unnest(
        ${keys.map((k) => k.source)}::text[],
        ${keys.map((k) => k.eventId)}::text[],
        ${keys.map((k) => k.routeId)}::text[],
        ${keys.map((k) => k.keyHash)}::text[]
      ) with ordinality as k(source, event_id, route_id, key_hash, position)
        on k.source = new_rows.source and k.event_id = new_rows.event_id
      order by new_rows.id, k.route_id, k.position
      on conflict do nothing)`
}

export interface ClaimBatcher {
  claim(event: NewEvent): Promise<ClaimResult>
  /** Claims gathering or in a statement now (backpressure's claim queue). */
  queued(): number
}

const MAX_BATCH = 100

/**
 * Gathers the claims of concurrent requests into one statement and one commit (group commit by
 * hand), so the ledger's per-request cost falls with load; each request is still answered only after
 * the statement holding its own row has committed. One value the statement could not take fails
 * only its own delivery: the batcher claims each of a failed batch alone (src/db/batcher.ts).
 */
export function createClaimBatcher(
  sql: postgres.Sql,
  hooks: {
    beforeCommit?: () => void
    afterCommit?: () => void
    /** How long each claim statement took (backpressure watches its p99). */
    observe?: (ms: number) => void
    /** The transaction that committed new rows, and how many (backpressure counts them). */
    inserted?: (xid: string, rows: number) => void
    /**
     * A claim not answered by then is a lost ledger (503): its statement's own deadline starts only
     * once it has a connection, and while the path is silent, reconnecting takes the connect timeout.
     */
    deadlineMs?: number
  } = {},
): ClaimBatcher {
  const batcher = createBatcher<NewEvent, ClaimResult>(
    async (events) => {
      const started = performance.now()
      hooks.beforeCommit?.()
      const results = await claimEvents(sql, events, hooks.inserted)
      hooks.afterCommit?.()
      hooks.observe?.(performance.now() - started)
      return results
    },
    { maxBatch: MAX_BATCH },
  )
  const { deadlineMs } = hooks
  return {
    claim: (event) =>
      deadlineMs === undefined ? batcher.run(event) : withLedgerDeadline(batcher.run(event), deadlineMs),
    queued: () => batcher.size(),
  }
}
