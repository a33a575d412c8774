// `npm run bench`: signed requests with unique ids through the full path and, in the same run,
// through a bare Hono route that only reads the body. Every load is bounded in time; all traffic
// stays on 127.0.0.1.
import { createHmac, randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import postgres from 'postgres'
import { runningEmbeddedUrl } from '../src/db/embedded.js'
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

/** One way of running the full path: its environment, and where its ledger can be read afterwards. */
interface Variant {
  label: string
  env: Record<string, string>
  ledgerUrl: () => Promise<string | undefined>
}

interface FullResult {
  load: Awaited<ReturnType<typeof load>>
  donePerSecond: number
  drained: boolean
}

/** Loads one variant, then waits for its backlog to drain and counts events DONE per second. */
async function runFull(variant: Variant, configPath: string): Promise<FullResult> {
  const full = await startChild(['bench/full-server.ts'], {
    ...variant.env,
    HOOKLEDGER_CONFIG: configPath,
    LOG_LEVEL: 'warn',
  })
  try {
    const result = await load(full.url)
    const url = await variant.ledgerUrl()
    if (url === undefined) throw new Error(`${variant.label}: its ledger cannot be found`)
    const ledger = postgres(url, { max: 1, onnotice: () => {} })
    try {
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
      const donePerSecond = stats && stats.seconds > 0 ? stats.done / stats.seconds : 0
      return { load: result, donePerSecond, drained }
    } finally {
      await ledger.end()
    }
  } finally {
    await full.kill('SIGTERM')
  }
}

async function main() {
  const run = randomBytes(4).toString('hex')
  const configPath = join(tmpdir(), `hl_bench_${run}.json`)
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
  // Each variant gets a ledger of its own, so no run counts another's rows.
  const databaseUrl = (suffix: string) => {
    const url = new URL(adminDatabaseUrl())
    url.pathname = `/hl_bench_${run}_${suffix}`
    return url.toString()
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-embedded-'))
  chmodSync(dataDir, 0o755) // reachable by the `postgres` user when the bench runs as root
  const variants: Variant[] = [
    {
      label: 'full path (verify, claim, commit, enqueue; worker in the same process)',
      env: { DATABASE_URL: databaseUrl('redis'), REDIS_URL: testRedisUrl() },
      ledgerUrl: async () => databaseUrl('redis'),
    },
    {
      label: 'the same on the in-process queue (REDIS_URL unset)',
      env: { DATABASE_URL: databaseUrl('inproc'), REDIS_URL: '' },
      ledgerUrl: async () => databaseUrl('inproc'),
    },
    {
      label: 'embedded mode: its own PostgreSQL and the in-process queue (both unset, as `npm start`)',
      env: { DATABASE_URL: '', REDIS_URL: '', HOOKLEDGER_DATA_DIR: join(dataDir, 'data') },
      ledgerUrl: () => runningEmbeddedUrl(join(dataDir, 'data')),
    },
  ]
  const admin = postgres(adminDatabaseUrl(), { max: 1, onnotice: () => {} })
  try {
    const bare = await startChild(['bench/bare-server.ts'], {})
    const bareResult = await load(bare.url)
    await bare.kill('SIGTERM')

    const rows: string[] = []
    let failed = false
    let fullPath: FullResult | undefined
    for (const variant of variants) {
      const result = await runFull(variant, configPath)
      fullPath ??= result
      const { load: l } = result
      rows.push(
        `| ${variant.label} | ${l.requestsPerSecond.toFixed(0)} | ${l.p50} | ${l.p99} | ${l.non2xx} | ${l.errors} | ${result.donePerSecond.toFixed(0)}${result.drained ? '' : ' (backlog not drained)'} |`,
      )
      failed ||= l.non2xx > 0 || l.errors > 0
    }

    const cpu = cpus()[0]?.model ?? 'unknown CPU'
    const lines = [
      `hookledger bench — ${cpus().length} cores (${cpu}), Node ${process.version}, ${CONNECTIONS} connections, ${DURATION_S} s per run, ~1 KB signed bodies, unique ids`,
      '',
      '| path | requests/s | p50 ms | p99 ms | non-2xx | errors | events DONE/s |',
      '|---|---:|---:|---:|---:|---:|---:|',
      `| bare Hono route (reads the body) | ${bareResult.requestsPerSecond.toFixed(0)} | ${bareResult.p50} | ${bareResult.p99} | ${bareResult.non2xx} | ${bareResult.errors} | – |`,
      ...rows,
      '',
      `ratio full/bare (requests/s): ${((fullPath?.load.requestsPerSecond ?? 0) / bareResult.requestsPerSecond).toFixed(2)}`,
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if (failed) process.exitCode = 1
  } finally {
    for (const suffix of ['redis', 'inproc']) {
      await admin.unsafe(`drop database if exists "hl_bench_${run}_${suffix}" with (force)`)
    }
    await admin.end()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

await main()
