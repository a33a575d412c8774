import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { beforeAll, describe, expect, it } from 'vitest'
import { runCommand } from '../support/run-command.js'
import { temporaryDirectory } from '../support/temp.js'

// Operator mistakes end the CLI with one line on stderr and a non-zero exit status, never a stack
// trace; a fault of ours (here: a database that does not answer) still prints its stack.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const CLI = 'src/cli/main.ts'
// Nothing listens on port 1: commands that stop at their arguments never notice, the rest fail.
const UNREACHABLE_DATABASE = 'postgres://hookledger@127.0.0.1:1/none'

const directory = temporaryDirectory('hookledger-cli-errors-')
// A data folder whose lock names a live process (this one): what a second `npm start` finds.
const busyDataDir = join(directory, 'busy')
mkdirSync(busyDataDir)
writeFileSync(join(busyDataDir, 'hookledger.pid'), `${process.pid}\n`)
const configPath = join(directory, 'hookledger.config.json')
writeFileSync(
  configPath,
  JSON.stringify({ sources: [{ id: 'acme', verify: { scheme: 'github', secrets: ['s3cret'] } }] }),
)

/** Runs the CLI as a child process; children run at once, since each spends seconds compiling. */
function runCli(args: string[], env: Record<string, string> = {}) {
  return runCommand(process.execPath, ['--import', 'tsx', CLI, ...args], {
    cwd: ROOT,
    env: { LOG_LEVEL: 'silent', HOOKLEDGER_CONFIG: configPath, ...env },
  })
}

const MISTAKES: {
  name: string
  args: string[]
  env?: Record<string, string>
  status: number
  says: RegExp
}[] = [
  { name: 'an unknown command', args: ['launch'], status: 2, says: /unknown command 'launch'/ },
  {
    name: "an unknown flag, without node's advice on positionals",
    args: ['serve', '--rol', 'api'],
    status: 2,
    says: /^hookledger: Unknown option '--rol' \(usage: hookledger --help\)\n$/,
  },
  {
    name: 'approvals show with an id that is not a uuid',
    args: ['approvals', 'show', '123'],
    env: { DATABASE_URL: UNREACHABLE_DATABASE },
    status: 2,
    says: /'123' is not an approval id: approval ids are uuids, as `hookledger approvals list` prints them/,
  },
  {
    name: 'approvals show with an id that is not a uuid, and no ledger running',
    args: ['approvals', 'show', '123'],
    env: { HOOKLEDGER_DATA_DIR: join(directory, 'no-ledger') },
    status: 2,
    says: /'123' is not an approval id/,
  },
  {
    name: 'a second serve on a data folder in use',
    args: ['serve'],
    // The shipped config, with its secret from ./example.env.
    env: { HOOKLEDGER_DATA_DIR: busyDataDir, HOOKLEDGER_CONFIG: join(ROOT, 'hookledger.config.json') },
    status: 1,
    says: new RegExp(
      `data folder .*busy is in use by hookledger process ${process.pid}: .*choose another HOOKLEDGER_DATA_DIR`,
    ),
  },
  {
    name: 'approvals decide without --by',
    args: ['approvals', 'decide', 'apr_1', '--decision', 'abandon'],
    env: { DATABASE_URL: UNREACHABLE_DATABASE },
    status: 2,
    says: /needs an ID, --decision retry\|record_success\|abandon and --by NAME/,
  },
  {
    name: 'evidence that is not JSON',
    args: [
      'approvals',
      'decide',
      '3f0c2a9e-5b7d-4c1a-9e2f-8d6b1a0c4e77',
      '--decision',
      'record_success',
      '--by',
      'dee',
      '--evidence',
      '{',
    ],
    env: { DATABASE_URL: UNREACHABLE_DATABASE },
    status: 2,
    says: /--evidence is not JSON/,
  },
  {
    name: 'a fixture file that is not there',
    args: ['sign', '--source', 'acme', join(directory, 'missing.json')],
    status: 1,
    says: /cannot read .*missing\.json: ENOENT/,
  },
  {
    name: 'a config file that is not there',
    args: ['sign', '--source', 'acme', 'fixtures/github/push.json'],
    env: { HOOKLEDGER_CONFIG: join(directory, 'nope.json') },
    status: 1,
    says: /cannot read config file .*nope\.json: ENOENT/,
  },
  {
    name: 'several bad environment variables, on one line',
    args: ['migrate'],
    env: { DATABASE_URL: 'mysql://x', PORT: 'many' },
    status: 1,
    says: /invalid environment: DATABASE_URL: must be a postgres:\/\/ URL; PORT: /,
  },
]

const FAULT = { args: ['approvals', 'list'], env: { DATABASE_URL: UNREACHABLE_DATABASE } }
let results: { status: number | null; stderr: string }[] = []
let fault: { status: number | null; stderr: string }
let debugged: { status: number | null; stderr: string }

beforeAll(async () => {
  ;[fault, debugged, ...results] = await Promise.all([
    runCli(FAULT.args, FAULT.env),
    runCli(['--debug', 'approvals', 'show', '123'], { DATABASE_URL: UNREACHABLE_DATABASE }),
    ...MISTAKES.map((mistake) => runCli(mistake.args, mistake.env)),
  ])
}, 120_000)

describe('the CLI reports an operator mistake in one line', () => {
  MISTAKES.forEach((mistake, index) => {
    it(mistake.name, () => {
      const { status, stderr } = results[index] ?? { status: null, stderr: '' }
      expect(status).toBe(mistake.status)
      expect(stderr).toMatch(mistake.says)
      expect(stderr.trimEnd().split('\n')).toHaveLength(1)
      expect(stderr).toMatch(/^hookledger[ :]/)
      expect(stderr).not.toMatch(/\n\s+at /)
    })
  })

  it('a fault that is not a mistake (the database does not answer) still prints its stack', () => {
    expect(fault.status).toBe(1)
    expect(fault.stderr).toMatch(/^hookledger: Error: Failed query: select/)
    expect(fault.stderr).toMatch(/\n\s+at /)
  })
})

describe('--debug', () => {
  it('prints the stack of a mistake after its one line', () => {
    expect(debugged.status).toBe(2)
    expect(debugged.stderr).toMatch(/^hookledger: '123' is not an approval id.*\nCliError: .*\n\s+at /)
  })
})
