// The intake's hand-written baseline: the receiver a team would write with this stack. Verify the
// Standard Webhooks signature with the `standardwebhooks` library, insert the event under a unique
// (source, id), add its BullMQ job, answer 200; the hand-written worker (baseline-forwarder.ts) forwards in the
// same process, as hookledger's does in the full path. The library's timestamp window is its only
// replay check (nothing notices a signed body resent under another id); no group commit, no relay
// for a job lost between the commit and the add.
import { serve } from '@hono/node-server'
import { Queue } from 'bullmq'
import { Hono } from 'hono'
import postgres from 'postgres'
import { Webhook } from 'standardwebhooks'
import { baselineJob, baselinePoolSize, requiredEnv, startBaselineForwarder } from './baseline-forwarder.js'

const redisUrl = requiredEnv('REDIS_URL')
const prefix = requiredEnv('BASELINE_PREFIX')
const queueName = requiredEnv('BASELINE_QUEUE')
// BASELINE_FORWARDING=off: the receive path alone, as the bench compares it with `serve --role api`.
const forwards = process.env.BASELINE_FORWARDING !== 'off'
const concurrency = Number(process.env.BASELINE_CONCURRENCY ?? 32)
const sql = postgres(requiredEnv('DATABASE_URL'), {
  max: baselinePoolSize({ receives: true, forwards, concurrency }),
  onnotice: () => {},
})
const webhook = new Webhook(requiredEnv('BASELINE_SECRET'))
const queue = new Queue(queueName, { connection: { url: redisUrl }, prefix })
const forwarder = !forwards
  ? { close: async () => {} }
  : startBaselineForwarder({
      sql,
      redisUrl,
      prefix,
      queue: queueName,
      destination: new URL(requiredEnv('BASELINE_DESTINATION')),
      concurrency,
    })

const app = new Hono()
  .get('/healthz', (c) => c.json({ status: 'ok' }))
  .post('/webhooks/:source', async (c) => {
    const body = Buffer.from(await c.req.arrayBuffer())
    try {
      webhook.verify(body.toString('utf8'), {
        'webhook-id': c.req.header('webhook-id') ?? '',
        'webhook-timestamp': c.req.header('webhook-timestamp') ?? '',
        'webhook-signature': c.req.header('webhook-signature') ?? '',
      })
    } catch {
      return c.json({ error: 'invalid signature' }, 401)
    }
    const [row] = await sql<{ id: string }[]>`
      insert into baseline_events (source, event_id, body)
      values (${c.req.param('source')}, ${c.req.header('webhook-id') ?? ''}, ${body})
      on conflict (source, event_id) do nothing returning id`
    if (row !== undefined) {
      const job = baselineJob(row.id)
      await queue.add(job.name, job.data, job.opts)
    }
    return c.json({ status: row === undefined ? 'duplicate' : 'accepted' }, 200)
  })

const server = serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 0), hostname: '127.0.0.1' })
process.once('SIGTERM', () => {
  server.close()
  void forwarder
    .close()
    .then(() => queue.close())
    .then(() => sql.end())
    .then(() => process.exit(0))
})
