// The hand-written at-least-once BullMQ worker hookledger is measured against, shared by the drain's
// baseline (baseline-worker.ts) and the intake's (baseline-receiver.ts). Take the job, select the
// row, POST it with a keep-alive agent, mark the row done. No lease, no attempt rows, no outbound
// ledger: a crash between the POST and the update sends the event again, which is exactly the
// guarantee hookledger adds.
import { Agent, request } from 'node:http'
import { Worker } from 'bullmq'
import type postgres from 'postgres'

/**
 * The baseline's ledger: one row per event. The receiver adds a unique index on `event_id` for its
 * dedup (bench/run.ts); the drain's backlog is written without one, so the drain's baseline pays for
 * no index it does not use.
 */
export async function createBaselineTable(sql: postgres.Sql): Promise<void> {
  await sql`
    create table if not exists baseline_events (
      id uuid primary key default gen_random_uuid(), event_id text not null, body bytea not null,
      status text not null default 'pending', processed_at timestamptz)`
}

/** The job that names a row: its id is derived from the row, so adding it twice adds it once. */
export const baselineJob = (rowId: string) => ({
  name: 'forward',
  data: { id: rowId },
  opts: { jobId: `b-${rowId}` },
})

export interface BaselineForwarderOptions {
  sql: postgres.Sql
  redisUrl: string
  prefix: string
  queue: string
  destination: URL
  concurrency: number
}

export function startBaselineForwarder(options: BaselineForwarderOptions): { close(): Promise<void> } {
  const { sql } = options
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency })
  const post = (body: Buffer, eventId: string) =>
    new Promise<number>((resolve, reject) => {
      const outgoing = request(
        options.destination,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'x-hookledger-event-id': eventId },
          timeout: 10_000,
        },
        (response) => {
          response.resume()
          response.on('end', () => resolve(response.statusCode ?? 0))
        },
      )
      outgoing.on('timeout', () => outgoing.destroy(new Error('timeout')))
      outgoing.on('error', reject)
      outgoing.end(body)
    })

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
  return {
    async close() {
      await worker.close()
      agent.destroy()
    },
  }
}

export function requiredEnv(name: string): string {
  const value = process.env[name]
  if (value === undefined || value === '') throw new Error(`${name} is required`)
  return value
}
