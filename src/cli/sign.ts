import { parseArgs } from 'node:util'
import type { ClientEnvironment } from '../config/env.js'
import { FixtureError, readFixture } from '../fixtures.js'
import { freshMessageId, loadSigningContext, signFixture, webhookUrl } from './signing.js'

export const SIGN_USAGE = `  hookledger sign --source ID FILE [--curl] [--url URL] [--secret S]
                                   print the headers the source's provider would send with FILE`

export interface CommandIo {
  stdout: (text: string) => void
  stderr: (text: string) => void
}

/**
 * `hookledger sign`: one `Name: value` line per header, the form `curl -H @file` reads, or with
 * `--curl` a whole curl command. The signature is made now, so send it within the tolerance.
 */
export async function runSign(args: string[], env: ClientEnvironment, io: CommandIo): Promise<number> {
  let parsed: ReturnType<typeof parse>
  try {
    parsed = parse(args)
  } catch (error) {
    io.stderr(`hookledger sign: ${(error as Error).message}\n\nusage:\n${SIGN_USAGE}\n`)
    return 2
  }
  const { values, positionals } = parsed
  const [file] = positionals
  if (values.source === undefined || file === undefined || positionals.length !== 1) {
    io.stderr(`hookledger sign: needs --source and exactly one FILE\n\nusage:\n${SIGN_USAGE}\n`)
    return 2
  }
  const scoped = values.config === undefined ? env : { ...env, HOOKLEDGER_CONFIG: values.config }
  let fixture: Awaited<ReturnType<typeof readFixture>>
  try {
    fixture = await readFixture(file)
  } catch (error) {
    if (!(error instanceof FixtureError)) throw error
    io.stderr(`hookledger sign: ${error.message}\n`)
    return 1
  }
  const context = await loadSigningContext(scoped, { sourceId: values.source, secret: values.secret })
  const headers = signFixture(context, fixture, {
    timestamp: Math.floor(Date.now() / 1000),
    fallbackId: freshMessageId(),
  })
  if (values.curl) {
    const url = webhookUrl(values.url, scoped, values.source)
    const parts = ['curl', '-sS', '-X', 'POST', ...headers.flatMap(([n, v]) => ['-H', quote(`${n}: ${v}`)])]
    io.stdout(`${[...parts, '--data-binary', quote(`@${file}`), quote(url)].join(' ')}\n`)
  } else {
    io.stdout(headers.map(([name, value]) => `${name}: ${value}\n`).join(''))
  }
  return 0
}

function parse(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      source: { type: 'string' },
      config: { type: 'string' },
      secret: { type: 'string' },
      url: { type: 'string' },
      curl: { type: 'boolean', default: false },
    },
  })
}

/** POSIX single quotes: nothing inside is expanded by the shell. */
function quote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`
}
