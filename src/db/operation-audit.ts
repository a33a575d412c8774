import type postgres from 'postgres'

type Fragment = postgres.PendingQuery<postgres.Row[]>

/**
 * The one INSERT into the append-only audit (operation_audit): `rows` is a SELECT of, in this order,
 * operation_id, operation_key, event, from_status, to_status, actor, details. Every transition
 * writes its row through this, in the statement that makes the transition.
 */
export function insertAudit(sql: postgres.Sql | postgres.TransactionSql, rows: Fragment): Fragment {
  return sql`insert into operation_audit (operation_id, operation_key, event, from_status, to_status, actor, details)
    ${rows}`
}
