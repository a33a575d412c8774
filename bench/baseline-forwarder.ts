// The hand-written at-least-once BullMQ worker hookledger is measured against, shared by the drain's
// baseline (baseline-worker.ts) and the intake's (baseline-receiver.ts). Take the job, select the
// row, POST it, mark the row done. No lease, no attempt rows, no outbound ledger: a crash between
// the POST and the update sends the event again, which is exactly the guarantee hookledger adds.
//
// On equal terms with hookledger, so that a ratio prices only the ledger: the POST goes through
// hookledger's own transport (sendHttp over a connectionPool, src/outbound/http-send.ts, as its
// forward handler sends), and the PostgreSQL pool has the size hookledger gives a process with the
// same roles (ledgerPoolSize, src/db/client.ts).
import { Worker } from 'bullmq'
import type postgres from 'postgres'
import { ledgerPoolSize } from '../src/db/client.js'
import { connectionPool, sendHttp } from '../src/outbound/http-send.js'

/**
 * The baseline's ledger: one row per event. The receiver adds a unique index on (source, event_id)
 * for its dedup, the key hookledger dedups on (bench/run.ts); the drain's backlog is written without
 * one, so the drain's baseline pays for no index it does not use.
 */
export async function createBaselineTable(sql: postgres.Sql): Promise<void> {
  await sql`
    create table if not exists baseline_events (
      id uuid primary key default gen_random_uuid(), source text not null default 'bench',
      event_id text not null, body bytea not null, status text not null default 'pending',
      processed_at timestamptz)`
}

/**
 * The job that names a row: its id is derived from the row, so adding it twice adds it once. A
 * failed forward (a timeout on a loaded machine, a reset) is tried again, as an at-least-once worker
 * must; with BullMQ's default of one attempt the event was lost and the drain waited in vain.
 */
export const baselineJob = (rowId: string) => ({
  name: 'forward',
  data: { id: rowId },
  opts: { jobId: `b-${rowId}`, attempts: 5, backoff: { type: 'exponential', delay: 200 } },
})

export interface BaselineForwarderOptions {
  sql: postgres.Sql
  redisUrl: string
  prefix: string
  queue: string
  destination: URL
  concurrency: number
}

/**
 * The baseline process's pool: what hookledger opens for a process with the same roles (a worker:
 * concurrency + 4; a receiver with its worker: concurrency + 8; a receiver alone: 10).
 */
export function baselinePoolSize(roles: {
  receives: boolean
  forwards: boolean
  concurrency: number
}): number {
  return ledgerPoolSize({
    configured: undefined,
    runsApi: roles.receives,
    runsWorker: roles.forwards,
    workerConcurrency: roles.concurrency,
  })
}

/** hookledger's forward timeout when the config sets none (src/config/config.ts). */
const FORWARD_TIMEOUT_MS = 10_000

export function startBaselineForwarder(options: BaselineForwarderOptions): { close(): Promise<void> } {
  const { sql } = options
  // One keep-alive pool for the destination's origin, as hookledger's forward keeps one per destination.
  const connections = connectionPool(options.destination.origin)
  const post = async (body: Buffer, eventId: string): Promise<number> => {
    const sent = await sendHttp(options.destination, {
      connections,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-hookledger-event-id': eventId },
      body,
      timeoutMs: FORWARD_TIMEOUT_MS,
      signals: [],
      guarded: false,
    })
    if (sent.kind !== 'answered') throw new Error(`forward failed: ${sent.error}`)
    return sent.answer.status
  }

  const worker = new Worker<{ id: string }>(
    options.queue,
    async (job) => {
      const [row] = await sql<{ id: string; event_id: string; body: Buffer }[]>`
        select id, event_id, body from baseline_events where id = ${job.data.id}`
      if (row === undefined) return
      const status = await post(row.body, row.event_id)
      if (status < 200 || status >= 300) throw new Error(`destination answered ${status}`)
      await sql`update baseline_events set status = 'done', processed_at = now() where id = ${row.id}`
    },
    {
      connection: { url: options.redisUrl, maxRetriesPerRequest: null },
      prefix: options.prefix,
      concurrency: options.concurrency,
    },
  )
  // A forward that failed shows in the process's output, which the bench prints when a drain stalls.
  worker.on('failed', (job, error) => process.stderr.write(`job ${job?.id} failed: ${error.message}\n`))
  return {
    async close() {
      await worker.close()
      await connections.close()
    },
  }
}

export function requiredEnv(name: string): string {
  const value = process.env[name]
  if (value === undefined || value === '') throw new Error(`${name} is required`)
  return value
}
