import { usageError } from './errors.js'
import { replayEventsCommand } from './events-replay.js'
import { listEventsCommand, showEventCommand } from './events-show.js'
import { tailEventsCommand } from './events-tail.js'
import type { CommandIo } from './sign.js'

export const EVENTS_USAGE = `  hookledger events list [FILTER] [--status S] [--limit N] [--json]
                                   events newest first (--limit 50); --json: one object per line
  hookledger events show ID [--source S] [--json]
                                   one event by row id or provider event id: status, attempts,
                                   routes, operations, last error
  hookledger events tail [--source S] [--json]
                                   follow new events and print each again with its outcome; Ctrl-C stops
  hookledger events replay [--status failed] [FILTER] [--by NAME] [--dry-run]
                                   replay every FAILED event of the filter, 1,000 per statement;
                                   interrupted, run it again: what is no longer FAILED is left alone
             FILTER: --source S, --type GLOB (invoice.*), --since TIME, --until TIME (ISO or 90m, 36h,
             3d back from now), --route R (a delivery to route R not done)`

export const EVENTS_EXAMPLES = `examples:
  hookledger events list --source stripe --status failed --since 2h
  hookledger events show evt_1QxY2Z --source stripe --json
  hookledger events tail --source github
  hookledger events replay --status failed --type 'invoice.*' --since 36h --dry-run
  hookledger events replay --status failed --route crm --by ana`

/** `hookledger events …`: list, show, follow and replay ledger events, on the database directly. */
export async function eventsCommand(
  args: string[],
  databaseUrl: () => Promise<string>,
  io: CommandIo,
): Promise<number> {
  const [sub, ...rest] = args
  if (
    sub === undefined ||
    sub === '--help' ||
    sub === '-h' ||
    rest.includes('--help') ||
    rest.includes('-h')
  ) {
    io.stdout(`usage:\n${EVENTS_USAGE}\n\n${EVENTS_EXAMPLES}\n`)
    return sub === undefined ? 2 : 0
  }
  switch (sub) {
    case 'list':
      return listEventsCommand(rest, await databaseUrl(), io)
    case 'show':
      return showEventCommand(rest, await databaseUrl(), io)
    case 'tail':
      return tailEventsCommand(rest, await databaseUrl(), io)
    case 'replay':
      return replayEventsCommand(rest, await databaseUrl(), io)
    default:
      throw usageError(`events: unknown subcommand '${sub}' (list, show, tail or replay)`)
  }
}
