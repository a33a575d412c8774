// The baseline hookledger's worker is measured against: the at-least-once BullMQ worker a team would
// write by hand. Take the job, select the row, POST it with a keep-alive agent, mark the row done.
// No lease, no attempt rows, no outbound ledger: a crash between the POST and the update sends the
// event again, which is exactly the guarantee hookledger adds.
import { Agent, createServer, request } from 'node:http'
import { Worker } from 'bullmq'
import postgres from 'postgres'

const env = {
  databaseUrl: required('DATABASE_URL'),
  redisUrl: required('REDIS_URL'),
  prefix: required('BASELINE_PREFIX'),
  queue: required('BASELINE_QUEUE'),
  destination: new URL(required('BASELINE_DESTINATION')),
  concurrency: Number(process.env.BASELINE_CONCURRENCY ?? 32),
}

function required(name: string): string {
  const value = process.env[name]
  if (value === undefined || value === '') throw new Error(`${name} is required`)
  return value
}

const sql = postgres(env.databaseUrl, { max: 10, onnotice: () => {} })
const agent = new Agent({ keepAlive: true, maxSockets: env.concurrency })

function post(body: Buffer, eventId: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const outgoing = request(
      env.destination,
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
}

const worker = new Worker<{ id: string }>(
  env.queue,
  async (job) => {
    const [row] = await sql<{ id: string; event_id: string; body: Buffer }[]>`
      select id, event_id, body from baseline_events where id = ${job.data.id}`
    if (row === undefined) return
    const status = await post(row.body, row.event_id)
    if (status < 200 || status >= 300) throw new Error(`destination answered ${status}`)
    await sql`update baseline_events set status = 'done', processed_at = now() where id = ${row.id}`
  },
  {
    connection: { url: env.redisUrl, maxRetriesPerRequest: null },
    prefix: env.prefix,
    concurrency: env.concurrency,
  },
)

// Only so the bench can see the process is up, the way it waits for hookledger's /healthz.
const health = createServer((_, response) => response.end('ok')).listen(
  Number(process.env.PORT ?? 0),
  '127.0.0.1',
)
process.once('SIGTERM', () => {
  void worker
    .close()
    .then(() => sql.end())
    .then(() => {
      health.close()
      agent.destroy()
      process.exit(0)
    })
})
