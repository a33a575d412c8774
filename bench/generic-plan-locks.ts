// What a generic plan of the lease locks on a ledger of many periods, and whether the server's lock
// table holds it when many connections make that plan at once: the measure behind
// GENERIC_PLAN_MAX_PERIODS (src/db/client.ts).
//
//   npx tsx bench/generic-plan-locks.ts
//
// For each `periods:connections` of LOCKS_CASES (default 37:96,62:96,93:48,123:48) it makes a ledger
// of that many daily periods, counts in pg_locks the relations one lease holds on a connection with
// plan_cache_mode=force_generic_plan (its first run, which makes the plan, and its second), then has
// that many such connections make their first lease at once and counts those that failed with "out
// of shared memory". It fills the server's lock table on purpose: run it alone, never beside tests.
import { randomUUID } from 'node:crypto'
import postgres from 'postgres'
import { leaseEvents } from '../src/db/events.js'
import { createTestDatabase } from '../test/support/database.js'
import { addPastDays } from '../test/support/periods.js'
import { claimedEventIds } from '../test/support/stored-events.js'

const CASES = (process.env.LOCKS_CASES ?? '37:96,62:96,93:48,123:48').split(',').map((pair) => {
  const [periods, connections] = pair.split(':').map(Number)
  return { periods: periods as number, connections: connections as number }
})
/** Today's period and the two made ahead (PARTITIONS_AHEAD_DAYS) come with every ledger. */
const PERIODS_OF_A_NEW_LEDGER = 3

const genericConnection = (url: string) =>
  postgres(url, { max: 1, onnotice: () => {}, connection: { plan_cache_mode: 'force_generic_plan' } })

const lease = (sql: postgres.Sql, id: string) =>
  leaseEvents(sql, [{ id, token: randomUUID(), jobId: `job-${id}` }], 60_000)

/** Relations one lease holds on a fresh generic-plan connection: its first run, then its second. */
async function locksOfOneLease(url: string, ids: readonly string[]) {
  const sql = genericConnection(url)
  try {
    const counts: number[] = []
    for (const id of ids) {
      await sql`begin`
      await lease(sql, id)
      const [row] = await sql<Array<{ locks: number }>>`
        select count(*)::int as locks from pg_locks where pid = pg_backend_pid() and locktype = 'relation'`
      await sql`rollback`
      counts.push(row?.locks ?? 0)
    }
    return counts
  } finally {
    await sql.end()
  }
}

console.log(
  '| periods | locks, first lease (plans) | locks, second | connections planning at once | failed: out of shared memory |',
)
console.log('|---:|---:|---:|---:|---:|')
for (const { periods, connections } of CASES) {
  const db = await createTestDatabase()
  try {
    await addPastDays(db.sql, periods - PERIODS_OF_A_NEW_LEDGER)
    const [first, second] = await locksOfOneLease(db.url, await claimedEventIds(db.sql, 2, 'bench'))
    const ids = await claimedEventIds(db.sql, connections, 'bench')
    const clients = ids.map(() => genericConnection(db.url))
    try {
      await Promise.all(clients.map((sql) => sql`select 1`))
      const outcomes = await Promise.allSettled(clients.map((sql, i) => lease(sql, ids[i] as string)))
      const failed = outcomes.filter(
        (outcome) => outcome.status === 'rejected' && /out of shared memory/.test(String(outcome.reason)),
      ).length
      console.log(`| ${periods} | ${first} | ${second} | ${connections} | ${failed} |`)
    } finally {
      await Promise.all(clients.map((sql) => sql.end()))
    }
  } finally {
    await db.drop()
  }
}
