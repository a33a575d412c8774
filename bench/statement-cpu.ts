// The PostgreSQL CPU of the three statements every forwarded event goes through (the claim, the lease,
// the settle: DONE with its attempt row), per event, on one connection with nothing else running: the
// backend's own CPU from /proc, not wall time, which on two busy cores is mostly waiting. It is the
// figure to compare before and after a change to one of those statements; `npm run bench` prices the
// whole system.
//
//   npx tsx bench/statement-cpu.ts
//
// STMT_EVENTS events (6400 by default) are measured after STMT_WARM (19,200) went the same way and an
// ANALYZE, so the plans are those of a ledger whose statistics know its tables, not of empty ones.
// STMT_BATCH (64) events per lease and settle, STMT_CLAIM (100) per claim, as the worker and the
// claim batcher make them at most. STMT_PAST_DAYS=N first adds the ledger periods of the N days
// before today (empty), as a ledger that keeps N days of history has them. STMT_HISTORY=N first fills
// N DONE events over ten past days with the scale section's SQL (bench/ledger-at-scale.ts: days 31
// and 29 to 21, each with its payload, attempt and dedup key; then VACUUM ANALYZE), so the plans are
// made with the statistics of a ledger that holds a history. STMT_GENERIC=1 runs them on a connection
// with plan_cache_mode=force_generic_plan, as the worker does. STMT_ORDERED=1 gives
// each event an ordering key, written by the claim. STMT_PERF=1 prints the backend's pid and waits 2 s before the
// measured part, for `perf record -g -p <pid>`.
import { createHash, randomUUID } from 'node:crypto'
import postgres from 'postgres'
import { claimEvents } from '../src/db/claims.js'
import { leaseEvents } from '../src/db/events.js'
import { operationBatches } from '../src/db/operation-batches.js'
import { createTestDatabase } from '../test/support/database.js'
import { addPastPeriods } from '../test/support/periods.js'
import { cpuMs } from './cpu.js'
import { fillScaleHistory } from './ledger-at-scale.js'
import { benchBody, DRAIN_BODY_BYTES } from './signing.js'

const EVENTS = Number(process.env.STMT_EVENTS ?? 6400)
const WARM = Number(process.env.STMT_WARM ?? 19_200)
const BATCH = Number(process.env.STMT_BATCH ?? 64)
const CLAIM = Number(process.env.STMT_CLAIM ?? 100)
const PAST_DAYS = Number(process.env.STMT_PAST_DAYS ?? 0)
const ORDERED = process.env.STMT_ORDERED === '1'
const HISTORY = Number(process.env.STMT_HISTORY ?? 0)
const GENERIC = process.env.STMT_GENERIC === '1'
const SOURCE = 'bench'
const LEASE_MS = 30_000

const db = await createTestDatabase()
const sql = postgres(db.url, {
  max: 1,
  onnotice: () => {},
  // As the worker's generic-plan connections run them (src/db/client.ts, openLedger).
  connection: GENERIC ? { plan_cache_mode: 'force_generic_plan' } : {},
})
try {
  if (PAST_DAYS > 0) await addPastPeriods(db.sql, { since: `${PAST_DAYS} days` })
  if (HISTORY > 0) {
    const fill = await fillScaleHistory(db.url, HISTORY)
    console.log(`history: ${fill.rows} events filled in ${(fill.insertMs / 1000).toFixed(1)} s`)
  }
  const [backend] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`
  const pid = backend?.pid as number
  const total = WARM + EVENTS
  let claimMs = 0
  for (let first = 0; first < total; first += CLAIM) {
    if (first === WARM) {
      await sql`analyze`
      claimMs = -cpuMs(pid)
    }
    await claimEvents(
      sql,
      Array.from({ length: Math.min(CLAIM, total - first) }, (_, i) => {
        const eventId = `evt_${first + i}`
        const body = Buffer.from(benchBody(eventId, DRAIN_BODY_BYTES))
        return {
          source: SOURCE,
          eventId,
          eventType: 'invoice.paid',
          payloadHash: createHash('sha256').update(body).digest('hex'),
          body,
          headers: { 'content-type': 'application/json', 'webhook-id': eventId },
          // One of ten keys in the source's own ordered scope, as an ordered source's claim writes.
          ...(ORDERED
            ? {
                orderingKeys: [
                  {
                    routeId: '',
                    keyHash: createHash('sha256')
                      .update(`key${i % 10}`)
                      .digest('hex'),
                  },
                ],
              }
            : {}),
        }
      }),
    )
  }
  claimMs += cpuMs(pid)

  const ids = (
    await sql<{ id: string }[]>`select id from inbound_events where status = 'pending' order by id`
  ).map((row) => row.id)
  const settle = operationBatches(sql).settle
  let leaseMs = 0
  let settleMs = 0
  for (let first = 0; first < ids.length; first += BATCH) {
    if (first === WARM) {
      await sql`analyze`
      leaseMs = 0
      settleMs = 0
      if (process.env.STMT_PERF === '1') {
        console.log(`backend pid ${pid}: perf record -g -p ${pid}`)
        await new Promise((resolve) => setTimeout(resolve, 2000))
      }
    }
    const requests = ids
      .slice(first, first + BATCH)
      .map((id) => ({ id, token: randomUUID(), jobId: 'bench' }))
    const beforeLease = cpuMs(pid)
    const leased = await leaseEvents(sql, requests, LEASE_MS)
    const beforeSettle = cpuMs(pid)
    leaseMs += beforeSettle - beforeLease
    const finishedAt = new Date()
    const settled = await Promise.all(
      leased.map((result, i) => {
        if (result.kind !== 'leased') throw new Error(`not leased: ${result.kind}`)
        return settle.run({
          done: {
            id: result.row.id,
            token: requests[i]?.token as string,
            attempt: 1,
            startedAt: finishedAt,
            finishedAt,
            responseStatus: 200,
            responseExcerpt: 'ok',
          },
        })
      }),
    )
    if (settled.some((s) => !s.done)) throw new Error('a settle was refused')
    settleMs += cpuMs(pid) - beforeSettle
  }
  const [done] = await sql<
    { n: number }[]
  >`select count(*)::int as n from inbound_events where status = 'done' and event_id like 'evt\\_%'`
  if (done?.n !== total) throw new Error(`${done?.n} of ${total} events DONE`)
  const perEvent = (ms: number) => ((ms / EVENTS) * 1000).toFixed(0)
  console.log(`backend CPU per event, ${EVENTS} events after ${WARM}:`)
  console.log(`  claim   ${perEvent(claimMs)} µs (batches of ${CLAIM})`)
  console.log(`  lease   ${perEvent(leaseMs)} µs (batches of ${BATCH})`)
  console.log(`  settle  ${perEvent(settleMs)} µs (DONE and its attempt row)`)
  // Whether each statement's plan is cached (generic) or made again at each call (custom): at batches
  // of one, a custom plan cost the claim and the settle ~0.5 ms each in planning alone.
  const plans = await sql<{ statement: string; generic: number; custom: number }[]>`
    select left(regexp_replace(statement, '[[:space:]]+', ' ', 'g'), 60) as statement, generic_plans::int as generic,
           custom_plans::int as custom
    from pg_prepared_statements where generic_plans + custom_plans > 100 order by statement`
  for (const plan of plans)
    console.log(`  plans: ${plan.generic} generic, ${plan.custom} custom: ${plan.statement}`)
} finally {
  await sql.end()
  await db.drop()
}
