import { existsSync, readFileSync } from 'node:fs'
import { parseEnv } from 'node:util'
import { EnvironmentError } from '../config/env.js'

/** Read when no `--env-file` is given and it exists in the working directory, as `npm start` reads it. */
export const DEFAULT_ENV_FILE = 'example.env'

export interface CommandLine {
  /** The arguments without `--env-file`. */
  args: string[]
  /** The env file's variables under the process environment: a variable already set wins. */
  environment: Record<string, string | undefined>
  /** Which env file was read, if any. */
  envFile: string | undefined
}

/**
 * Takes `--env-file PATH` (or `--env-file=PATH`, anywhere on the line) out of `argv` and merges that
 * file under `processEnv`. Without the flag, `./example.env` is read when present, so every command
 * of a fresh clone sees the example source's secret exactly as `npm start` does.
 */
export function readCommandLine(argv: readonly string[], processEnv: NodeJS.ProcessEnv): CommandLine {
  const args: string[] = []
  let named: string | undefined
  for (let index = 0; index < argv.length; index += 1) {
    const arg = argv[index] as string
    if (arg === '--env-file') {
      named = argv[index + 1]
      if (named === undefined || named === '') throw new EnvironmentError(['--env-file: needs a PATH'])
      index += 1
    } else if (arg.startsWith('--env-file=')) {
      named = arg.slice('--env-file='.length)
    } else {
      args.push(arg)
    }
  }
  const envFile = named ?? (existsSync(DEFAULT_ENV_FILE) ? DEFAULT_ENV_FILE : undefined)
  if (envFile === undefined) return { args, environment: { ...processEnv }, envFile }
  let text: string
  try {
    text = readFileSync(envFile, 'utf8')
  } catch (error) {
    throw new EnvironmentError([
      `--env-file: cannot read ${envFile}: ${(error as NodeJS.ErrnoException).code}`,
    ])
  }
  return { args, environment: { ...parseEnv(text), ...processEnv }, envFile }
}
