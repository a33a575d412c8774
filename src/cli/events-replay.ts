import { countReplayable, replayFailedByFilter } from '../db/bulk-replay.js'
import { openLedger } from '../db/client.js'
import { parseCommandLine, usageError } from './errors.js'
import { FILTER_OPTIONS, filterOfFlags } from './events-filter.js'
import type { CommandIo } from './sign.js'

/** The exit status of a replay stopped by Ctrl-C (128 + SIGINT), as a shell reports one. */
const EXIT_INTERRUPTED = 130
const BAR_WIDTH = 30

/**
 * `hookledger events replay`: the FAILED events of a filter, a chunk per statement through the same
 * code as the admin API and page. The rows go back to PENDING with enqueued_at cleared; the running
 * service's relay gives them their jobs (as for `hookledger backfill`), so this needs no Redis and
 * no queue prefix. Ctrl-C stops after the chunk under way; running the command again replays only
 * what is still FAILED.
 */
export async function replayEventsCommand(
  args: string[],
  databaseUrl: string,
  io: CommandIo & { isTTY?: boolean },
): Promise<number> {
  const { values } = parseCommandLine({
    args,
    options: {
      ...FILTER_OPTIONS,
      status: { type: 'string', default: 'failed' },
      by: { type: 'string', default: 'cli' },
      'dry-run': { type: 'boolean' },
    },
    strict: true,
  })
  const { status, ...filter } = filterOfFlags(values)
  if (status !== 'failed') {
    throw usageError(
      `only FAILED events are replayed (a DONE event's effects happened, a PENDING or PROCESSING one is the worker's); got --status ${status}`,
    )
  }
  const ledger = openLedger(databaseUrl, { max: 1 })
  let interrupted = false
  const onSignal = () => {
    // A second Ctrl-C leaves at once; the chunk under way commits whole or not at all either way.
    if (interrupted) process.exit(EXIT_INTERRUPTED)
    interrupted = true
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  try {
    const total = await countReplayable(ledger.db, filter)
    if (values['dry-run'] === true) {
      io.stdout(`${total} FAILED event${total === 1 ? '' : 's'} match; dry run, nothing replayed\n`)
      return 0
    }
    const started = performance.now()
    const tty = io.isTTY ?? process.stderr.isTTY === true
    const result = await replayFailedByFilter(ledger.db, {
      filter,
      by: values.by,
      stopped: () => interrupted,
      onChunk: tty ? (done) => io.stderr(`\r${bar(done, total, performance.now() - started)}`) : undefined,
    })
    if (tty) io.stderr('\n')
    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    if (interrupted && result.next !== undefined) {
      io.stdout(
        `interrupted: replayed ${result.replayed} of ${total} in ${seconds} s; run the same command again to replay the rest\n`,
      )
      return EXIT_INTERRUPTED
    }
    io.stdout(
      `replayed ${result.replayed} FAILED event${result.replayed === 1 ? '' : 's'} in ${seconds} s; the running service's relay enqueues them\n`,
    )
    return 0
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    await ledger.close()
  }
}

/** `[#######.......] 7000/20000  35%  4100/s`; the total is the count at the start, so it may be passed. */
function bar(done: number, total: number, elapsedMs: number): string {
  const share = total === 0 ? 1 : Math.min(1, done / total)
  const filled = Math.round(share * BAR_WIDTH)
  const rate = elapsedMs > 0 ? Math.round((done * 1000) / elapsedMs) : 0
  return `[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${done}/${total}  ${Math.round(share * 100)}%  ${rate}/s`
}
