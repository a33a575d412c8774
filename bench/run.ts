// `npm run bench`: signed requests with unique ids through the full path and, in the same run,
// through a bare Hono route that only reads the body. Every load is bounded in time; all traffic
// stays on 127.0.0.1.
import { createHmac, randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import postgres from 'postgres'
import { migrateLedger } from '../src/db/migrate.js'
import { createLogger } from '../src/logger.js'
import { startChild } from '../test/support/child.js'
import { adminDatabaseUrl, testRedisUrl } from '../test/support/env.js'

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50)
const SECRET = randomBytes(32)
const BODY_PAD = 'x'.repeat(700) // about 1 KB bodies, like a typical provider event

let sequence = 0
function signedRequest() {
  sequence += 1
  const id = `msg_bench_${process.pid}_${sequence}`
  const timestamp = Math.floor(Date.now() / 1000)
  const body = JSON.stringify({ type: 'invoice.paid', data: { id: `in_${sequence}`, pad: BODY_PAD } })
  const signature = createHmac('sha256', SECRET).update(`${id}.${timestamp}.${body}`).digest('base64')
  return {
    method: 'POST' as const,
    body,
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': `v1,${signature}`,
    },
  }
}

async function load(url: string) {
  const result = await autocannon({
    url: `${url}/webhooks/bench`,
    connections: CONNECTIONS,
    duration: DURATION_S,
    requests: [{ setupRequest: (request) => ({ ...request, ...signedRequest() }) }],
  })
  return {
    requestsPerSecond: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    total: result.requests.total,
  }
}

async function main() {
  const name = `hl_bench_${randomBytes(4).toString('hex')}`
  const url = new URL(adminDatabaseUrl())
  url.pathname = `/${name}`
  const databaseUrl = url.toString()
  await migrateLedger(databaseUrl, createLogger('silent'))
  const configPath = join(tmpdir(), `${name}.json`)
  writeFileSync(
    configPath,
    JSON.stringify({
      sources: [
        {
          id: 'bench',
          verify: { scheme: 'standard-webhooks', secrets: [`whsec_${SECRET.toString('base64')}`] },
        },
      ],
      worker: { concurrency: 16 },
    }),
  )
  const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
  const ledger = postgres(databaseUrl, { max: 1, onnotice: () => {} })
  try {
    const bare = await startChild(['bench/bare-server.ts'], {})
    const bareResult = await load(bare.url)
    await bare.kill('SIGTERM')

    const full = await startChild(['bench/full-server.ts'], {
      DATABASE_URL: databaseUrl,
      REDIS_URL: testRedisUrl(),
      HOOKLEDGER_CONFIG: configPath,
      LOG_LEVEL: 'warn',
    })
    const fullResult = await load(full.url)
    // Events DONE per second: from the first receipt to the last DONE, once the backlog drained.
    const deadline = Date.now() + 120_000
    let drained = false
    while (Date.now() < deadline) {
      const [row] =
        await ledger`select count(*) filter (where status <> 'done')::int as open from inbound_events`
      if (row?.open === 0) {
        drained = true
        break
      }
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    const [stats] = await ledger`
      select count(*)::int as done,
             extract(epoch from max(processed_at) - min(received_at))::float8 as seconds
      from inbound_events where status = 'done'`
    await full.kill('SIGTERM')

    const donePerSecond = stats && stats.seconds > 0 ? stats.done / stats.seconds : 0
    const cpu = cpus()[0]?.model ?? 'unknown CPU'
    const lines = [
      `hookledger bench — ${cpus().length} cores (${cpu}), Node ${process.version}, ${CONNECTIONS} connections, ${DURATION_S} s per run, ~1 KB signed bodies, unique ids`,
      '',
      '| path | requests/s | p50 ms | p99 ms | non-2xx | errors | events DONE/s |',
      '|---|---:|---:|---:|---:|---:|---:|',
      `| bare Hono route (reads the body) | ${bareResult.requestsPerSecond.toFixed(0)} | ${bareResult.p50} | ${bareResult.p99} | ${bareResult.non2xx} | ${bareResult.errors} | – |`,
      `| full path (verify, claim, commit, enqueue; worker in the same process) | ${fullResult.requestsPerSecond.toFixed(0)} | ${fullResult.p50} | ${fullResult.p99} | ${fullResult.non2xx} | ${fullResult.errors} | ${donePerSecond.toFixed(0)}${drained ? '' : ' (backlog not drained)'} |`,
      '',
      `ratio full/bare (requests/s): ${(fullResult.requestsPerSecond / bareResult.requestsPerSecond).toFixed(2)}`,
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if (fullResult.non2xx > 0 || fullResult.errors > 0) process.exitCode = 1
  } finally {
    await ledger.end()
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
  }
}

await main()
