import { openLedger } from '../db/client.js'
import { enableRoute, listDisabledRoutes, resumedText } from '../db/event-routes.js'
import { CliError, parseCommandLine, usageError } from './errors.js'

export const ROUTES_USAGE = `  hookledger routes disabled                                 routes a 410 Gone disabled, and why
  hookledger routes enable SOURCE ROUTE                      deliver to a disabled route again`

/** `hookledger routes …`: routes a destination disabled with 410 Gone, on the ledger directly. */
export async function routesCommand(args: string[], databaseUrl: string, out: (text: string) => void) {
  const [sub, ...rest] = args
  const ledger = openLedger(databaseUrl, { max: 2 })
  try {
    switch (sub) {
      case 'disabled': {
        parseCommandLine({ args: rest, options: {}, strict: true })
        const rows = await listDisabledRoutes(ledger.sql)
        for (const row of rows) {
          out(`${row.source}/${row.routeId}  since ${row.disabledAt.toISOString()}  ${row.reason}`)
        }
        if (rows.length === 0) out('no disabled routes')
        return 0
      }
      case 'enable': {
        const { positionals } = parseCommandLine({ args: rest, allowPositionals: true, strict: true })
        const [source, route] = positionals
        if (source === undefined || route === undefined || positionals.length !== 2) {
          throw usageError('routes enable needs a SOURCE and a ROUTE id')
        }
        const enabled = await enableRoute(ledger.sql, source, route)
        if (enabled === undefined) throw new CliError(`route ${source}/${route} is not disabled`)
        out(`${source}/${route} enabled: ${resumedText(enabled.resumed)}`)
        return 0
      }
      default:
        throw usageError(`routes: unknown subcommand '${sub ?? ''}' (disabled or enable)`)
    }
  } finally {
    await ledger.close()
  }
}
