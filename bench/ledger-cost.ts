// What a system cost its PostgreSQL database over a span of the bench, counted in ways that do not
// depend on the machine's load: the rows each table gained, updated (HOT or not) and lost, the
// commits, and the WAL of the records that touched this database. The WAL is read back with
// pg_walinspect and kept to this database's records (and the commit records of its transactions):
// the server's WAL position alone counts every database on it, and the machine a bench runs on may
// have other work writing to the same server.
import postgres from 'postgres'

export interface TableCost {
  inserted: number
  updated: number
  /** Of the updates, those that wrote no index entry (heap-only tuples). */
  hotUpdated: number
  deleted: number
  /** Indexes on the table: each insert and each non-HOT update writes an entry in every one (partial ones aside). */
  indexes: number
}

export interface LedgerCost {
  commits: number
  /** WAL of this database's records, in bytes; undefined when pg_walinspect could not read the span. */
  walBytes: number | undefined
  /** Of which full-page images: the first change of a page after a checkpoint, so they depend on its timing. */
  fullPageBytes: number | undefined
  tables: Map<string, TableCost>
}

export interface LedgerCostMeter {
  /** Call once the system's processes have ended (or gone idle): their statistics reach the server then. */
  stop(): Promise<LedgerCost>
}

interface TableCounters {
  name: string
  inserted: string
  updated: string
  hot: string
  deleted: string
  indexes: number
}

/** Starts counting a database's cost; `databaseUrl` must be a superuser's (pg_walinspect reads the WAL). */
export async function startLedgerCost(databaseUrl: string): Promise<LedgerCostMeter> {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} })
  await sql`create extension if not exists pg_walinspect`
  const before = await counters(sql)
  const [start] = await sql<{ lsn: string }[]>`select pg_current_wal_insert_lsn()::text as lsn`
  return {
    async stop() {
      try {
        const after = await counters(sql)
        // Everything the system committed is flushed (synchronous commit); the WAL after this point
        // is not its.
        const [end] = await sql<{ lsn: string }[]>`select pg_current_wal_flush_lsn()::text as lsn`
        const wal = await databaseWal(sql, start?.lsn ?? '0/0', end?.lsn ?? '0/0')
        const tables = new Map<string, TableCost>()
        for (const table of after.tables) {
          const old = before.tables.find((t) => t.name === table.name)
          const delta = (field: 'inserted' | 'updated' | 'hot' | 'deleted') =>
            Number(table[field]) - Number(old?.[field] ?? 0)
          const cost = {
            inserted: delta('inserted'),
            updated: delta('updated'),
            hotUpdated: delta('hot'),
            deleted: delta('deleted'),
            indexes: table.indexes,
          }
          if (cost.inserted + cost.updated + cost.deleted > 0) tables.set(table.name, cost)
        }
        return { commits: after.commits - before.commits, ...wal, tables }
      } finally {
        await sql.end()
      }
    },
  }
}

async function counters(sql: postgres.Sql): Promise<{ commits: number; tables: TableCounters[] }> {
  // This session's own pending counters reach the shared statistics now, not at its next idle flush.
  await sql`select pg_stat_force_next_flush()`
  const tables = await sql<TableCounters[]>`
    select t.relname as name, t.n_tup_ins::text as inserted, t.n_tup_upd::text as updated,
           t.n_tup_hot_upd::text as hot, t.n_tup_del::text as deleted,
           (select count(*)::int from pg_index i where i.indrelid = t.relid) as indexes
    from pg_stat_user_tables t`
  const [database] = await sql<{ commits: string }[]>`
    select xact_commit::text as commits from pg_stat_database where datname = current_database()`
  return { commits: Number(database?.commits ?? 0), tables }
}

async function databaseWal(
  sql: postgres.Sql,
  start: string,
  end: string,
): Promise<{ walBytes: number | undefined; fullPageBytes: number | undefined }> {
  try {
    // A record is this database's when a block it changes is (`rel <tablespace>/<database>/<file>`);
    // a commit record names no block, so it counts when its transaction wrote one of those.
    const [row] = await sql<{ bytes: string; fpi: string }[]>`
      with record as materialized (
        select xid::text::bigint as xid, record_length, fpi_length, resource_manager,
               block_ref ~ (' rel \\d+/' || (select oid from pg_database where datname = current_database()) || '/') as mine
        from pg_get_wal_records_info(${start}::pg_lsn, ${end}::pg_lsn)),
      transaction as (select distinct xid from record where mine and xid <> 0)
      select coalesce(sum(record_length), 0)::text as bytes, coalesce(sum(fpi_length), 0)::text as fpi
      from record
      where mine or (resource_manager = 'Transaction' and xid in (select xid from transaction))`
    return { walBytes: Number(row?.bytes ?? 0), fullPageBytes: Number(row?.fpi ?? 0) }
  } catch {
    // The span's WAL was recycled already (a checkpoint in between), or the extension is missing.
    return { walBytes: undefined, fullPageBytes: undefined }
  }
}

/**
 * The events a system stored over the span: the rows its event table gained (hookledger's
 * inbound_events, the hand-written receiver's baseline_events). A timed load's count of answers
 * misses the requests still in flight when it stopped, which the system stored all the same.
 */
export function eventsStored(cost: LedgerCost): number {
  return (
    (cost.tables.get('inbound_events')?.inserted ?? 0) + (cost.tables.get('baseline_events')?.inserted ?? 0)
  )
}

/** Per event: rows inserted, updated (of which HOT), deleted, summed over the tables; the tables one by one. */
export function costPerEvent(cost: LedgerCost, events: number) {
  const per = (value: number) => value / Math.max(events, 1)
  let inserted = 0
  let updated = 0
  let hotUpdated = 0
  let deleted = 0
  let indexEntries = 0
  for (const table of cost.tables.values()) {
    inserted += table.inserted
    updated += table.updated
    hotUpdated += table.hotUpdated
    deleted += table.deleted
    indexEntries += (table.inserted + table.updated - table.hotUpdated) * table.indexes
  }
  return {
    inserted: per(inserted),
    updated: per(updated),
    hotUpdated: per(hotUpdated),
    deleted: per(deleted),
    /** At most this many: a partial index skips the rows outside it. */
    indexEntries: per(indexEntries),
    commits: per(cost.commits),
    walBytes: cost.walBytes === undefined ? undefined : per(cost.walBytes),
    fullPageBytes: cost.fullPageBytes === undefined ? undefined : per(cost.fullPageBytes),
  }
}

/** One line per table that changed: what it wrote per event. */
export function tableLines(cost: LedgerCost, events: number): string[] {
  const per = (value: number) => (value / Math.max(events, 1)).toFixed(2)
  return [...cost.tables.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([name, t]) =>
        `${name}: ${per(t.inserted)} inserted, ${per(t.updated)} updated (${per(t.hotUpdated)} HOT), ${per(t.deleted)} deleted; ${t.indexes} indexes`,
    )
}

/** A table of what each system cost its database per event, then each one's tables line by line. */
export function costTable(
  heading: string,
  rows: { label: string; cost: LedgerCost; events: number }[],
): string[] {
  const kb = (bytes: number | undefined) => (bytes === undefined ? '–' : (bytes / 1024).toFixed(2))
  return [
    `| ${heading} | rows inserted | rows updated (HOT) | rows deleted | index entries (at most) | transactions (read-only ones too) | WAL KB, this database's records | of which full-page images |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(({ label, cost, events }) => {
      const c = costPerEvent(cost, events)
      return `| ${label} | ${c.inserted.toFixed(2)} | ${c.updated.toFixed(2)} (${c.hotUpdated.toFixed(2)}) | ${c.deleted.toFixed(2)} | ${c.indexEntries.toFixed(1)} | ${c.commits.toFixed(2)} | ${kb(c.walBytes)} | ${kb(c.fullPageBytes)} |`
    }),
    '',
    ...rows.flatMap(({ label, cost, events }) => [
      `${label}, per event:`,
      ...tableLines(cost, events).map((line) => `- ${line}`),
    ]),
  ]
}
