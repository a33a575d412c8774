import type postgres from 'postgres'

/** A dedup key definition under its version; the definition is kept as the caller gave it (jsonb). */
export interface VersionedDedupKey<Definition> {
  version: number
  definition: Definition
}

/** What the ledger holds about one source's dedup key. */
export interface DedupKeyState<Definition> {
  source: string
  /** The key recorded in source_dedup_keys; undefined when none was ever recorded. */
  recorded: VersionedDedupKey<Definition> | undefined
  /** Whether the source has any event kept: only then was anything keyed by a definition. */
  hasEvents: boolean
}

/**
 * Runs `work` in a transaction holding the source's dedup-key lock, so one start-up at a time per
 * source reads and records its definition: two processes cannot record two definitions.
 */
export async function underDedupKeyLock<T>(
  sql: postgres.Sql,
  source: string,
  work: (tx: postgres.TransactionSql) => Promise<T>,
): Promise<T> {
  const result = await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext('hookledger:dedup-key'), hashtext(${source}))`
    return work(tx)
  })
  // begin's type unwraps arrays of pending queries; `work` resolves to a plain value.
  return result as T
}

/** Each source's recorded dedup key and whether it has events, in the order given (pool or transaction). */
export async function dedupKeyStates<Definition>(
  client: postgres.ISql,
  sources: readonly string[],
): Promise<Array<DedupKeyState<Definition>>> {
  const rows = await client<
    Array<{ source: string; version: number | null; definition: Definition | null; kept: boolean }>
  >`
    select s.source, k.version, k.definition,
      exists (select 1 from inbound_events e where e.source = s.source) as kept
    from unnest(${sources as string[]}::text[]) with ordinality as s(source, n)
    left join source_dedup_keys k on k.source = s.source
    order by s.n`
  return rows.map((row) => ({
    source: row.source,
    recorded:
      row.version !== null && row.definition !== null
        ? { version: row.version, definition: row.definition }
        : undefined,
    hasEvents: row.kept,
  }))
}

/** Records `key` as the source's dedup key; a row already holding it is left as it is. */
export async function recordDedupKey(
  client: postgres.ISql,
  source: string,
  key: VersionedDedupKey<unknown>,
): Promise<void> {
  await client`
    insert into source_dedup_keys (source, version, definition)
    values (${source}, ${key.version}, ${JSON.stringify(key.definition)}::jsonb)
    on conflict (source) do update set version = excluded.version, definition = excluded.definition,
      recorded_at = now()
    where source_dedup_keys.version <> excluded.version or source_dedup_keys.definition <> excluded.definition`
}
