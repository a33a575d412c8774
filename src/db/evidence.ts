import type postgres from 'postgres'

/** The event that carries a piece of evidence. */
export interface EvidenceEvent {
  rowId: string
  source: string
  eventId: string
  eventType: string | null
  /** When the event was received: evidence can only be about an operation claimed before that. */
  receivedAt: Date
}

/** What one event says about one operation, as operation_evidence keeps it. */
export interface Evidence {
  operationKey: string
  outcome: 'succeeded' | 'failed'
  downstreamId: string | null
  /** The failure marker's value, for a failure event. */
  failure: string | null
  /** What the evidence may settle: the settle statement applies it only to these tools and key prefixes. */
  settles: { tools?: readonly string[] | undefined; keyPrefixes?: readonly string[] | undefined }
}

/**
 * Keeps what an event says about an operation. Idempotent: a redelivered job, a second worker or a
 * replay of the event finds the row there and adds nothing (unique on source and event id).
 */
export async function recordEvidence(
  client: postgres.Sql,
  event: EvidenceEvent,
  evidence: Evidence,
): Promise<void> {
  await client`
    insert into operation_evidence
      (source, event_id, event_type, event_row_id, operation_key, outcome, downstream_id, failure,
        settles_tools, settles_key_prefixes, event_received_at)
    values (${event.source}, ${event.eventId}, ${event.eventType}, ${event.rowId}, ${evidence.operationKey},
      ${evidence.outcome}, ${evidence.downstreamId}, ${evidence.failure},
      ${evidence.settles.tools ?? null}, ${evidence.settles.keyPrefixes ?? null},
      ${event.receivedAt.toISOString()}::timestamptz)
    on conflict (source, event_id) do nothing`
}

/**
 * Keys with evidence still waiting whose operation nobody is calling right now, oldest first: the
 * sweep tries each (a crash left it unapplied). Evidence naming no operation of this ledger is left
 * out, so it cannot crowd the others out of the batch.
 */
export async function keysWithPendingEvidence(client: postgres.Sql, limit: number): Promise<string[]> {
  const rows = await client<Array<{ operation_key: string }>>`
    select e.operation_key from operation_evidence e
    join operations o on o.operation_key = e.operation_key
    where e.status = 'pending' and (o.lease_until is null or o.lease_until < now())
    group by e.operation_key order by min(e.id) limit ${limit}`
  return rows.map((row) => row.operation_key)
}

export interface EvidenceRow {
  source: string
  eventId: string
  eventType: string | null
  outcome: 'succeeded' | 'failed'
  status: 'pending' | 'applied' | 'superseded' | 'not_applicable'
  /** Why it did not settle the operation (not_applicable). */
  note: string | null
  downstreamId: string | null
  receivedAt: Date
}

/** The evidence named for one operation key, oldest first (the operation's page, tests). */
export async function evidenceFor(client: postgres.Sql, operationKey: string): Promise<EvidenceRow[]> {
  const rows = await client`
    select source, event_id, event_type, outcome, status, note, downstream_id,
      coalesce(event_received_at, received_at) as received_at
    from operation_evidence where operation_key = ${operationKey} order by id`
  return rows.map((row) => ({
    source: String(row.source),
    eventId: String(row.event_id),
    eventType: row.event_type === null ? null : String(row.event_type),
    outcome: row.outcome as EvidenceRow['outcome'],
    status: row.status as EvidenceRow['status'],
    note: row.note === null ? null : String(row.note),
    downstreamId: row.downstream_id === null ? null : String(row.downstream_id),
    receivedAt: new Date(row.received_at as string | Date),
  }))
}
