// The drain's baseline process: the hand-written at-least-once BullMQ worker (baseline-forwarder.ts)
// on a backlog the bench queued, the way a team would run it next to its receiver.
import { createServer } from 'node:http'
import postgres from 'postgres'
import { baselinePoolSize, requiredEnv, startBaselineForwarder } from './baseline-forwarder.js'

const concurrency = Number(process.env.BASELINE_CONCURRENCY ?? 32)
const sql = postgres(requiredEnv('DATABASE_URL'), {
  max: baselinePoolSize({ receives: false, forwards: true, concurrency }),
  onnotice: () => {},
})
const forwarder = startBaselineForwarder({
  sql,
  redisUrl: requiredEnv('REDIS_URL'),
  prefix: requiredEnv('BASELINE_PREFIX'),
  queue: requiredEnv('BASELINE_QUEUE'),
  destination: new URL(requiredEnv('BASELINE_DESTINATION')),
  concurrency,
})

// Only so the bench can see the process is up, the way it waits for hookledger's /healthz.
const health = createServer((_, response) => response.end('ok')).listen(
  Number(process.env.PORT ?? 0),
  '127.0.0.1',
)
process.once('SIGTERM', () => {
  void forwarder
    .close()
    .then(() => sql.end())
    .then(() => {
      health.close()
      process.exit(0)
    })
})
