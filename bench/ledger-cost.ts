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
  /**
   * The WAL by what its records changed (the first block a record names): a table's heap, its
   * indexes, its TOAST; and the commit records. Empty when the WAL could not be read.
   */
  walByRelation: Map<string, number>
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
  // A temporary replication slot of this session keeps the span's WAL until it is read: checkpoints
  // (frequent when other work shares the server) would otherwise remove the segments first.
  await sql`
    select pg_create_physical_replication_slot('hl_bench_' || pg_backend_pid(), true, true)`
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
): Promise<Pick<LedgerCost, 'walBytes' | 'fullPageBytes' | 'walByRelation'>> {
  try {
    // A record is this database's when a block it changes is (`rel <tablespace>/<database>/<file>`);
    // a commit record names no block, so it counts when its transaction wrote one of those. Each
    // record is put to the relation of the first block it names: a heap, an index (its table's
    // indexes), or a TOAST table (its owner's).
    const rows = await sql<{ relation: string; bytes: string; fpi: string }[]>`
      with record as materialized (
        select xid::text::bigint as xid, record_length, fpi_length, resource_manager,
               substring(block_ref from ' rel \\d+/' || (select oid from pg_database where datname = current_database())
                 || '/(\\d+) ')::oid as file
        from pg_get_wal_records_info(${start}::pg_lsn, ${end}::pg_lsn)),
      transaction as (select distinct xid from record where file is not null and xid <> 0),
      relation as (
        select pg_relation_filenode(c.oid) as file,
               case
                 when c.relkind = 'i' then (select t.relname from pg_index i join pg_class t on t.oid = i.indrelid
                                            where i.indexrelid = c.oid) || ' indexes'
                 when c.relkind = 't' then coalesce((select o.relname from pg_class o where o.reltoastrelid = c.oid),
                                                    c.relname) || ' TOAST'
                 else c.relname
               end as name
        from pg_class c where pg_relation_filenode(c.oid) is not null)
      select coalesce(r.name, case when record.file is null then 'commit records' else 'other' end) as relation,
             sum(record_length)::text as bytes, sum(fpi_length)::text as fpi
      from record left join relation r on r.file = record.file
      where record.file is not null or (resource_manager = 'Transaction' and xid in (select xid from transaction))
      group by 1`
    const walByRelation = new Map(rows.map((row) => [row.relation, Number(row.bytes)]))
    const sum = (field: 'bytes' | 'fpi') => rows.reduce((total, row) => total + Number(row[field]), 0)
    return { walBytes: sum('bytes'), fullPageBytes: sum('fpi'), walByRelation }
  } catch (error) {
    // The extension is missing, or the server would not keep the WAL.
    process.stderr.write(
      `the WAL of ${start}..${end} was not read: ${error instanceof Error ? error.message : error}\n`,
    )
    return { walBytes: undefined, fullPageBytes: undefined, walByRelation: new Map() }
  }
}

/**
 * The events a system stored over the span: the rows its event table gained (hookledger's
 * inbound_events, the hand-written receiver's baseline_events). A timed load's count of answers
 * misses the requests still in flight when it stopped, which the system stored all the same.
 */
export function eventsStored(cost: LedgerCost): number {
  let stored = 0
  // inbound_events is partitioned by period (migration 0018): its rows are counted in its partitions.
  for (const [name, table] of cost.tables) {
    if (/^(inbound_events(_\d+)?|baseline_events)$/.test(name)) stored += table.inserted
  }
  return stored
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
      `- WAL bytes by relation: ${walLine(cost, events)}`,
    ]),
  ]
}

/** The WAL by relation per event, the largest first. */
function walLine(cost: LedgerCost, events: number): string {
  if (cost.walByRelation.size === 0) return '–'
  return [...cost.walByRelation]
    .sort((a, b) => b[1] - a[1])
    .map(([relation, bytes]) => `${relation} ${(bytes / Math.max(events, 1)).toFixed(0)}`)
    .join(', ')
}
