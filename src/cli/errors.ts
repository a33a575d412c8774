import { type ParseArgsConfig, parseArgs } from 'node:util'
import { ConfigError } from '../config/config.js'
import { EnvironmentError } from '../config/env.js'
import { EmbeddedPostgresError } from '../db/embedded.js'
import { FixtureError } from '../fixtures.js'

/** The command ran but failed: a file that cannot be read, an approval that is not there. */
export const EXIT_FAILURE = 1
/** The command line itself is wrong: an unknown command or flag, a missing argument. */
export const EXIT_USAGE = 2

/**
 * A mistake the operator can fix from the message alone. It is printed as one line with no stack
 * trace: a stack points at our code, and here the fault is in the command line or its inputs.
 */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT_FAILURE,
  ) {
    super(message)
    this.name = 'CliError'
  }
}

export function usageError(message: string): CliError {
  return new CliError(message, EXIT_USAGE)
}

/** node's parseArgs, with its TypeError for an unknown or malformed flag turned into a usage error. */
export function parseCommandLine<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config)
  } catch (error) {
    if (error instanceof TypeError && 'code' in error && String(error.code).startsWith('ERR_PARSE_ARGS')) {
      // node's advice on positionals that start with '-' (with a quote it never closes) fits a
      // typo'd flag badly: the flag's name is the whole message.
      throw usageError(error.message.replace(/\. To specify a positional argument .*$/s, ''))
    }
    throw error
  }
}

/** Parses JSON given on the command line, naming the flag when it is not JSON. */
export function parseJsonFlag(text: string | undefined, flag: string): unknown {
  if (text === undefined) return undefined
  try {
    return JSON.parse(text)
  } catch (error) {
    throw usageError(`${flag} is not JSON: ${(error as Error).message}`)
  }
}

/**
 * The operator's mistake behind `error`, or undefined when it is a fault of ours. Lower layers have
 * their own types for bad input: the config file, the environment, a fixture.
 */
function operatorMistake(error: unknown): CliError | undefined {
  if (error instanceof CliError) return error
  if (error instanceof ConfigError || error instanceof EnvironmentError || error instanceof FixtureError) {
    return new CliError(error.message)
  }
  // The data folder in use, no binaries for this platform, root without a postgres user: the
  // machine's state, which the message names how to change. A server that crashed is not.
  if (error instanceof EmbeddedPostgresError && error.operatorFixable) return new CliError(error.message)
  return undefined
}

/** For `.catch`: a lower layer's bad-input error (a fixture, the config file) as a CliError; others pass. */
export function asCliError(error: unknown): never {
  throw operatorMistake(error) ?? error
}

/**
 * The one way a command ends on an error: a mistake is one line on stderr and its exit code (a
 * usage mistake adds where the usage is), anything else prints its stack, since that is a bug to
 * report. With `debug` (the `--debug` flag) a mistake prints its stack after the line too.
 * Returns the exit code.
 */
export function reportFailure(
  error: unknown,
  command: string,
  writeStderr: (text: string) => void,
  options: { debug?: boolean } = {},
): number {
  const mistake = operatorMistake(error)
  if (mistake === undefined) {
    writeStderr(`${command}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
    return EXIT_FAILURE
  }
  const hint = mistake.exitCode === EXIT_USAGE ? ` (usage: ${usageHint(command)})` : ''
  writeStderr(`${command}: ${oneLine(mistake.message)}${hint}\n`)
  if (options.debug === true && error instanceof Error && error.stack !== undefined) {
    writeStderr(`${error.stack}\n`)
  }
  return mistake.exitCode
}

/** `hookledger sign --help` for a subcommand's mistake, `hookledger --help` for the CLI's own. */
function usageHint(command: string): string {
  return command === 'hookledger' ? 'hookledger --help' : `${command} --help`
}

/** Messages listing several problems (the environment, a config file) joined onto one line. */
function oneLine(message: string): string {
  const parts = message
    .split('\n')
    .map((part) => part.trim().replace(/^- /, ''))
    .filter((part) => part !== '')
  return parts.reduce(
    (line, part) => (line === '' ? part : `${line}${line.endsWith(':') ? ' ' : '; '}${part}`),
    '',
  )
}

/**
 * Runs a command that writes through `io` (and is called as a function too): the CliErrors it
 * raises are reported there and become its exit code; any other error goes up to the caller.
 */
export async function reportingCliErrors(
  command: string,
  io: { stderr: (text: string) => void; debug?: boolean },
  body: () => Promise<number>,
): Promise<number> {
  try {
    return await body()
  } catch (error) {
    if (error instanceof CliError) return reportFailure(error, command, io.stderr, { debug: io.debug })
    throw error
  }
}
