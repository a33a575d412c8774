import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { beforeAll, describe, expect, it } from 'vitest'
import { COMMAND_HELP } from '../../src/cli/help.js'
import { runCommand } from '../support/run-command.js'

// Run as a user runs it: the bin executed through its shebang (`npx hookledger`), not `node FILE`,
// since the shebang is what keeps node 20 off `--env-file`.
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const VERSION = (JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { version: string }).version

interface Result {
  status: number | null
  stdout: string
  stderr: string
}

function hookledger(args: string[]): Promise<Result> {
  return runCommand(`${ROOT}/bin/hookledger.js`, args, { cwd: ROOT, env: { LOG_LEVEL: 'silent' } })
}

const COMMANDS = Object.keys(COMMAND_HELP)
const asked: Record<string, Result> = {}

beforeAll(async () => {
  // The first run builds dist/ when it is stale; the others then start from it at once.
  asked.version = await hookledger(['--version'])
  const runs: [string, string[]][] = [
    ['-v', ['-v']],
    ['--help', ['--help']],
    ['-h', ['-h']],
    ['missing env file', ['--env-file', 'nope.env', 'sign']],
    ['help of an unknown command', ['launch', '--help']],
    ...COMMANDS.flatMap((command): [string, string[]][] => [
      [`${command} --help`, [command, '--help']],
      [`${command} -h`, [command, '-h']],
    ]),
    // Help wins over the rest of the line, which is not checked (nor run) then.
    ['approvals decide --help', ['approvals', 'decide', '--help']],
  ]
  const results = await Promise.all(runs.map(([, args]) => hookledger(args)))
  runs.forEach(([name], index) => {
    asked[name] = results[index] as Result
  })
}, 180_000)

describe('hookledger --help and --version', () => {
  it('--version and -v print the package version, exit 0', () => {
    for (const flag of ['version', '-v']) {
      expect(asked[flag]).toMatchObject({ status: 0, stdout: `${VERSION}\n`, stderr: '' })
    }
  })

  it('--help and -h list every command, exit 0', () => {
    for (const flag of ['--help', '-h']) {
      const result = asked[flag]
      expect(result?.status).toBe(0)
      for (const command of COMMANDS) expect(result?.stdout).toContain(`hookledger ${command}`)
      expect(result?.stdout).toContain('hookledger --version')
    }
  })

  it.each(COMMANDS)('%s --help and -h print its usage and examples, exit 0', (command) => {
    for (const flag of ['--help', '-h']) {
      const result = asked[`${command} ${flag}`]
      expect(result?.stderr).toBe('')
      expect(result?.status).toBe(0)
      expect(result?.stdout).toMatch(new RegExp(`^usage:\\n  hookledger ${command}`))
      expect(result?.stdout).toMatch(/\nexamples:\n {2}(\S+=\S+ )?hookledger /)
      expect(result?.stdout).toContain('--env-file PATH')
    }
  })

  it('a subcommand with --help prints the help and does nothing else', () => {
    expect(asked['approvals decide --help']).toMatchObject({ status: 0, stderr: '' })
  })

  it('help of an unknown command is a usage mistake, in one line', () => {
    expect(asked['help of an unknown command']).toMatchObject({
      status: 2,
      stdout: '',
      stderr: "hookledger: unknown command 'launch' (usage: hookledger --help)\n",
    })
  })

  it('--env-file with a missing file is our one line (exit 1), not node 20 taking the flag (exit 9)', () => {
    const result = asked['missing env file']
    expect(result?.status).toBe(1)
    expect(result?.stderr).toMatch(/^hookledger: invalid environment: --env-file: cannot read nope\.env/)
    expect(result?.stderr.trimEnd().split('\n')).toHaveLength(1)
  })
})
