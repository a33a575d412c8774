import type { ClientEnvironment } from '../config/env.js'
import { readFixture } from '../fixtures.js'
import { asCliError, parseCommandLine, reportingCliErrors, usageError } from './errors.js'
import { freshMessageId, loadSigningContext, SIGNING_FLAGS, signFixture, webhookUrl } from './signing.js'

export const SIGN_USAGE = `  hookledger sign --source ID FILE [--curl] [--url URL] [--secret S]
                                   print the headers the source's provider would send with FILE`

export interface CommandIo {
  stdout: (text: string) => void
  stderr: (text: string) => void
  /** `--debug`: a mistake's stack is printed after its one line. */
  debug?: boolean
}

/**
 * `hookledger sign`: one `Name: value` line per header, the form `curl -H @file` reads, or with
 * `--curl` a whole curl command. The signature is made now, so send it within the tolerance.
 */
export function runSign(args: string[], env: ClientEnvironment, io: CommandIo): Promise<number> {
  return reportingCliErrors('hookledger sign', io, () => sign(args, env, io))
}

async function sign(args: string[], env: ClientEnvironment, io: CommandIo): Promise<number> {
  const { values, positionals } = parse(args)
  const [file] = positionals
  if (values.source === undefined || file === undefined || positionals.length !== 1) {
    throw usageError('needs --source and exactly one FILE')
  }
  const scoped = values.config === undefined ? env : { ...env, HOOKLEDGER_CONFIG: values.config }
  const fixture = await readFixture(file).catch(asCliError)
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
  return parseCommandLine({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      ...SIGNING_FLAGS,
      curl: { type: 'boolean', default: false },
    },
  })
}

/** POSIX single quotes: nothing inside is expanded by the shell. */
function quote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`
}
