import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type postgres from 'postgres'
import type { Config } from '../../src/config/config.js'
import { buildConfig } from '../../src/service/config.js'
import { type CommandResult, type RunningCommand, runCommand } from '../support/run-command.js'
import { FAST_RELAY, FAST_WORKER } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PEAK_RSS = fileURLToPath(new URL('../support/peak-rss.mjs', import.meta.url))

/**
 * `count` FAILED events of `source`, as a worker leaves them after its last attempt, in one statement
 * (20,000 HTTP deliveries that fail would take minutes). received_at is a millisecond apart per row,
 * an hour back, so the replay's keyset walks distinct times. Bodies carry the event id, which is how
 * the destination counts what it received.
 */
export async function seedFailedEvents(sql: postgres.Sql, source: string, count: number): Promise<void> {
  await sql`
    with seeded as (
      select i, convert_to(json_build_object('id', ${source} || '_' || i, 'type', 'order.created')::text, 'UTF8')
               as body
      from generate_series(1, ${count}) as i),
    inserted as (
      insert into inbound_events (source, event_id, event_type, payload_hash, headers, status, attempts,
                                  last_error, received_at, enqueued_at)
      select ${source}, ${source} || '_' || i, 'order.created', encode(sha256(body), 'hex'),
             '{"content-type":"application/json"}'::jsonb, 'failed', 3, 'destination answered HTTP 503',
             now() - interval '1 hour' + i * interval '1 millisecond', now()
      from seeded
      returning id, event_id)
    insert into inbound_event_payloads (event_row_id, body)
    select inserted.id, seeded.body from inserted join seeded on inserted.event_id = ${source} || '_' || seeded.i`
}

/**
 * A forward to `url` for each source, with the fast test worker and relay: a route named `sink`
 * (through the outbound ledger), or with `sourceForward` the source's own (`handler: forward`), which
 * writes no operation rows and costs the worker a fraction of a route's per event.
 */
export function forwardingConfig(
  sources: readonly string[],
  url: string,
  { sourceForward = false }: { sourceForward?: boolean } = {},
): Config {
  return buildConfig(
    {
      sources: sources.map((id) => ({
        id,
        verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
        ...(sourceForward
          ? { handler: { type: 'forward', url } }
          : { routes: [{ id: 'sink', forward: { url } }] }),
      })),
      // Forwarding 20,000 events is most of these tests' time: more handlers at once shorten it.
      worker: { ...FAST_WORKER, concurrency: 16 },
      relay: FAST_RELAY,
    },
    () => undefined,
  )
}

/** How many times the destination received each event id (from the forwarded bodies). */
export function countsById(received: ReadonlyArray<{ body: string }>): Map<string, number> {
  const counts = new Map<string, number>()
  for (const { body } of received) {
    const id = (JSON.parse(body) as { id: string }).id
    counts.set(id, (counts.get(id) ?? 0) + 1)
  }
  return counts
}

export interface CliRun extends CommandResult {
  /** The kernel's peak resident set size of the process, in MiB (undefined when killed with SIGKILL). */
  peakRssMb: number | undefined
}

/** The built CLI in a child process on `databaseUrl`; `onSpawn` may signal it while it runs. */
export async function runCli(
  args: string[],
  databaseUrl: string,
  options: {
    rssFile?: string
    onSpawn?: (child: RunningCommand) => (() => void) | undefined
    timeoutMs?: number
  } = {},
): Promise<CliRun> {
  if (options.rssFile !== undefined) writeFileSync(options.rssFile, '')
  const run = await runCommand(process.execPath, ['--import', PEAK_RSS, 'bin/hookledger.js', ...args], {
    cwd: ROOT,
    env: { LOG_LEVEL: 'silent', DATABASE_URL: databaseUrl, PEAK_RSS_FILE: options.rssFile ?? '' },
    timeoutMs: options.timeoutMs ?? 60_000,
    onSpawn: options.onSpawn,
  })
  const text = options.rssFile === undefined ? '' : readFileSync(options.rssFile, 'utf8')
  return { ...run, peakRssMb: text === '' ? undefined : Number(text) / 1024 }
}
