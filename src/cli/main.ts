import pino from 'pino'
import { type Environment, EnvironmentError, readClientEnvironment, readEnvironment } from '../config/env.js'
import { runningEmbeddedUrl } from '../db/embedded.js'
import { migrateLedger } from '../db/migrate.js'
import { createLogger } from '../logger.js'
import { type Role, startService } from '../service/service.js'
import { approvalsCommand } from './approvals.js'
import { runBackfillCommand } from './backfill.js'
import { runDoctorCommand } from './doctor.js'
import { readCommandLine } from './env-file.js'
import { parseCommandLine, reportFailure, usageError } from './errors.js'
import { eventsCommand } from './events.js'
import { asksForHelp, commandHelp, overallUsage, packageVersion } from './help.js'
import { runReplay } from './replay.js'
import { routesCommand } from './routes.js'
import { runSign } from './sign.js'

const ROLES: readonly Role[] = ['all', 'api', 'worker']

async function main(argv: string[], debug: boolean): Promise<number> {
  const { args, environment } = readCommandLine(argv, process.env)
  const [command, ...rest] = args
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`${overallUsage()}\n`)
    return command === undefined ? 2 : 0
  }
  if (command === '--version' || command === '-v' || command === 'version') {
    process.stdout.write(`${packageVersion()}\n`)
    return 0
  }
  if (asksForHelp(rest)) {
    const help = commandHelp(command)
    if (help === undefined) throw usageError(`unknown command '${command}'`)
    process.stdout.write(`${help}\n`)
    return 0
  }
  if (command === 'serve') {
    const { values } = parseCommandLine({
      args: rest,
      options: { role: { type: 'string', default: 'all' }, config: { type: 'string' } },
      strict: true,
    })
    const role = values.role as Role
    if (!ROLES.includes(role)) throw usageError(`--role must be one of ${ROLES.join(', ')}`)
    const env = readEnvironment({
      ...environment,
      ...(values.config === undefined ? {} : { HOOKLEDGER_CONFIG: values.config }),
    })
    const logger = createLogger(env.LOG_LEVEL)
    const service = await startService({ env, role, logger })
    await new Promise<void>((resolve) => {
      let stopping = false
      const stop = (signal: string) => {
        if (stopping) {
          // A second Ctrl-C: leave now. process.exit runs the exit hooks, which stop an embedded
          // PostgreSQL (in a process group of its own, no signal from the terminal reaches it).
          logger.warn({ signal }, 'second signal: exiting without waiting for running handlers')
          process.exit(130)
        }
        stopping = true
        logger.info({ signal }, 'shutting down')
        resolve()
      }
      process.on('SIGTERM', stop)
      process.on('SIGINT', stop)
      // The terminal closed: shut down as on Ctrl-C rather than die and leave an embedded server behind.
      process.on('SIGHUP', stop)
    })
    await service.close()
    return 0
  }
  const io = {
    stdout: (text: string) => process.stdout.write(text),
    stderr: (text: string) => process.stderr.write(text),
    debug,
  }
  if (command === 'sign') return runSign(rest, readClientEnvironment(environment), io)
  if (command === 'replay') return runReplay(rest, readClientEnvironment(environment), io)
  if (command === 'migrate') {
    parseCommandLine({ args: rest, options: {}, strict: true })
    const env = readEnvironment(environment)
    await migrateLedger(await ledgerUrl(env), createLogger(env.LOG_LEVEL))
    return 0
  }
  if (command === 'backfill') {
    const env = readEnvironment(environment)
    // The report is the command's output on stdout; the log lines go to stderr beside the errors.
    const logger = createLogger(env.LOG_LEVEL, pino.destination(2))
    return runBackfillCommand(rest, env, () => ledgerUrl(env), { ...io, logger })
  }
  if (command === 'doctor') {
    return runDoctorCommand(rest, { environment: () => readEnvironment(environment), ledgerUrl }, io)
  }
  if (command === 'approvals') {
    const env = readEnvironment(environment)
    return approvalsCommand(
      rest,
      () => ledgerUrl(env),
      (line) => process.stdout.write(`${line}\n`),
    )
  }
  if (command === 'events') {
    // The database is looked up only once a subcommand needs it, so `events --help` works without one.
    return eventsCommand(rest, async () => ledgerUrl(readEnvironment(environment)), io)
  }
  if (command === 'routes') {
    const url = await ledgerUrl(readEnvironment(environment))
    return routesCommand(rest, url, (line) => process.stdout.write(`${line}\n`))
  }
  throw usageError(`unknown command '${command}'`)
}

/** DATABASE_URL, or else the embedded server that a running `hookledger serve` owns. */
async function ledgerUrl(env: Environment): Promise<string> {
  const url = env.DATABASE_URL ?? (await runningEmbeddedUrl(env.HOOKLEDGER_DATA_DIR))
  if (url === undefined) {
    throw new EnvironmentError([
      `DATABASE_URL: is not set, and no embedded PostgreSQL runs in ${env.HOOKLEDGER_DATA_DIR} (start \`hookledger serve\` first)`,
    ])
  }
  return url
}

/** `--debug` anywhere before a `--`: kept out of the arguments every command parses. */
function takeDebugFlag(argv: string[]): { argv: string[]; debug: boolean } {
  const end = argv.indexOf('--')
  const options = end === -1 ? argv : argv.slice(0, end)
  const rest = end === -1 ? [] : argv.slice(end)
  return {
    argv: [...options.filter((arg) => arg !== '--debug'), ...rest],
    debug: options.includes('--debug'),
  }
}

const commandLine = takeDebugFlag(process.argv.slice(2))
main(commandLine.argv, commandLine.debug).then(
  (code) => process.exit(code),
  (error: unknown) =>
    process.exit(
      reportFailure(error, 'hookledger', (text) => process.stderr.write(text), { debug: commandLine.debug }),
    ),
)
