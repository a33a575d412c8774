import { readFileSync } from 'node:fs'
import { APPROVALS_USAGE } from './approvals.js'
import { BACKFILL_USAGE } from './backfill.js'
import { DOCTOR_USAGE } from './doctor.js'
import { DEFAULT_ENV_FILE } from './env-file.js'
import { EVENTS_EXAMPLES, EVENTS_USAGE } from './events.js'
import { REPLAY_USAGE } from './replay.js'
import { ROUTES_USAGE } from './routes.js'
import { SIGN_USAGE } from './sign.js'

export const SERVE_USAGE = `  hookledger serve [--role all|api|worker] [--config PATH]   run the receiver and/or the worker`
export const MIGRATE_USAGE = `  hookledger migrate                                          apply pending ledger migrations, then exit`

const GLOBAL_OPTIONS = `options of every command:
  --env-file PATH   variables for the command (default ./${DEFAULT_ENV_FILE} when present);
                    variables already set in the environment win
  --debug           print the stack trace of an error too (one line without it)
  -h, --help        this command's usage and examples`

/**
 * Each command's `--help`: its usage lines, then examples that run as shown in a fresh clone
 * (`npm start` in another terminal where they need the service or its embedded ledger).
 */
export const COMMAND_HELP: Readonly<Record<string, string>> = {
  serve: `${SERVE_USAGE}

  --role all     the receiver and the worker in one process (the default; the only role of embedded mode)
  --role api     the receiver only: verify, claim, answer (needs DATABASE_URL and REDIS_URL)
  --role worker  the worker only: run handlers and forwards (needs DATABASE_URL and REDIS_URL)

examples:
  hookledger serve                                   embedded mode when DATABASE_URL is unset
  hookledger serve --role worker --env-file prod.env`,
  migrate: `${MIGRATE_USAGE}

examples:
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/hookledger hookledger migrate`,
  approvals: `${APPROVALS_USAGE}

  ID is an approval's id, a uuid as \`approvals list\` prints it.

examples:
  hookledger approvals list
  hookledger approvals show 3f0c2a9e-5b7d-4c1a-9e2f-8d6b1a0c4e77
  hookledger approvals decide 3f0c2a9e-5b7d-4c1a-9e2f-8d6b1a0c4e77 --by dee \\
             record_success --evidence '{"ticket":"T-1"}'`,
  backfill: `${BACKFILL_USAGE}

examples:
  hookledger backfill --source stripe --since 36h
  hookledger backfill --source github --json`,
  events: `${EVENTS_USAGE}

${EVENTS_EXAMPLES}`,
  doctor: `${DOCTOR_USAGE}

examples:
  hookledger doctor
  hookledger doctor --json --processes api=2,worker=3`,
  routes: `${ROUTES_USAGE}

examples:
  hookledger routes disabled
  hookledger routes enable shop crm`,
  sign: `${SIGN_USAGE}

examples:
  hookledger sign --source example fixtures/standard-webhooks/invoice.paid.json
  hookledger sign --source example fixtures/standard-webhooks/invoice.paid.json --curl | sh`,
  replay: `${REPLAY_USAGE}

examples:
  hookledger replay fixtures/standard-webhooks --source example
  hookledger replay fixtures/standard-webhooks/invoice.paid.json --source example --times 5`,
}

/** The usage of every command, for `hookledger --help`. */
export function overallUsage(): string {
  const commands = [
    SERVE_USAGE,
    MIGRATE_USAGE,
    APPROVALS_USAGE,
    BACKFILL_USAGE,
    DOCTOR_USAGE,
    EVENTS_USAGE,
    ROUTES_USAGE,
    SIGN_USAGE,
    REPLAY_USAGE,
  ]
  return `usage:
${commands.join('\n')}
  hookledger COMMAND --help                                   a command's usage and examples
  hookledger --version                                        the installed version

${GLOBAL_OPTIONS}

environment: DATABASE_URL, REDIS_URL (both unset: embedded mode), HOOKLEDGER_DATA_DIR (./.hookledger),
             PORT (3000), HOST (127.0.0.1 in embedded mode, else 0.0.0.0),
             HOOKLEDGER_CONFIG (./hookledger.config.json), LOG_LEVEL (info),
             ADMIN_TOKEN, AGENT_TOKEN, METRICS_TOKEN (see the README's Configuration)`
}

/** One command's help: its usage and examples, then the options every command takes. */
export function commandHelp(command: string): string | undefined {
  const help = COMMAND_HELP[command]
  return help === undefined ? undefined : `usage:\n${help}\n\n${GLOBAL_OPTIONS}`
}

/** `-h` or `--help` among the arguments, before a `--` that ends the options. */
export function asksForHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--')
  return (end === -1 ? args : args.slice(0, end)).some((arg) => arg === '--help' || arg === '-h')
}

/** The version in the package's own package.json (two folders up from src/cli and dist/cli alike). */
export function packageVersion(): string {
  const manifest: unknown = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
  if (typeof manifest === 'object' && manifest !== null && 'version' in manifest) {
    return String(manifest.version)
  }
  return 'unknown'
}
