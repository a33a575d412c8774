import { readCapped } from '../backfill/bounded-fetch.js'
import type { ClientEnvironment } from '../config/env.js'
import { type Fixture, listFixtures, readFixture } from '../fixtures.js'
import { asCliError, parseCommandLine, reportingCliErrors, usageError } from './errors.js'
import type { CommandIo } from './sign.js'
import { freshMessageId, loadSigningContext, SIGNING_FLAGS, signFixture, webhookUrl } from './signing.js'

export const REPLAY_USAGE = `  hookledger replay FILE|DIR... --source ID [--url URL] [--times N] [--concurrency C] [--secret S]
                                   sign each fixture now and POST it to URL/webhooks/ID, N times each`

type Outcome = 'accepted' | 'duplicate' | 'handshake' | 'error'

interface Delivery {
  fixture: Fixture
  messageId: string
  round: number
}

const REQUEST_TIMEOUT_MS = 30_000
/** hookledger answers a delivery with a few hundred bytes of JSON: a longer answer is not its own. */
const MAX_ANSWER_BYTES = 64 * 1024

/**
 * `hookledger replay`: signs every delivery afresh (a provider re-signs its retries too) and sends
 * it. Any answer but 200 is unexpected and makes the exit status 1; with `--times 5` the first copy
 * of each fixture is accepted and the others come back as duplicates.
 */
export function runReplay(args: string[], env: ClientEnvironment, io: CommandIo): Promise<number> {
  return reportingCliErrors('hookledger replay', io, () => replay(args, env, io))
}

async function replay(args: string[], env: ClientEnvironment, io: CommandIo): Promise<number> {
  const options = parseOptions(args)
  const scoped = options.config === undefined ? env : { ...env, HOOKLEDGER_CONFIG: options.config }
  const fixtures = await listFixtures(options.paths)
    .then((paths) => Promise.all(paths.map((path) => readFixture(path))))
    .catch(asCliError)
  const context = await loadSigningContext(scoped, { sourceId: options.source, secret: options.secret })
  const url = webhookUrl(options.url, scoped, options.source)

  const deliveries: Delivery[] = []
  for (const fixture of fixtures) {
    // One id per fixture, reused by every copy: the copies are retries of one event, not new events.
    const messageId = freshMessageId()
    for (let round = 1; round <= options.times; round += 1) deliveries.push({ fixture, messageId, round })
  }

  const counts: Record<Outcome, number> = { accepted: 0, duplicate: 0, handshake: 0, error: 0 }
  const started = Date.now()
  let next = 0
  const send = async (delivery: Delivery) => {
    const headers = signFixture(context, delivery.fixture, {
      timestamp: Math.floor(Date.now() / 1000),
      fallbackId: delivery.messageId,
    })
    const begun = Date.now()
    const { status, outcome, detail } = await post(url, headers, delivery.fixture.body)
    counts[outcome] += 1
    const label = `${delivery.fixture.path}${options.times > 1 ? ` #${delivery.round}` : ''}`
    io.stdout(
      `${String(status ?? '---').padEnd(3)} ${outcome.padEnd(9)} ${label}  ${detail} (${Date.now() - begun} ms)\n`,
    )
  }
  const lanes = Array.from({ length: Math.min(options.concurrency, deliveries.length) }, async () => {
    while (next < deliveries.length) {
      const delivery = deliveries[next]
      next += 1
      if (delivery !== undefined) await send(delivery)
    }
  })
  await Promise.all(lanes)
  io.stdout(
    `${deliveries.length} deliveries to ${url} in ${Date.now() - started} ms: ${counts.accepted} accepted, ` +
      `${counts.duplicate} duplicate, ${counts.handshake} handshake, ${counts.error} unexpected\n`,
  )
  return counts.error === 0 ? 0 : 1
}

async function post(
  url: string,
  headers: Array<[string, string]>,
  body: Buffer,
): Promise<{ status: number | undefined; outcome: Outcome; detail: string }> {
  let response: Response
  let text: string
  const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS)
  try {
    response = await fetch(url, { method: 'POST', headers, body, redirect: 'manual', signal })
    // The deadline covers the answer's body too (readCapped races it against each read).
    const read = await readCapped(response, MAX_ANSWER_BYTES, signal)
    text = typeof read === 'string' ? read : `(an answer of over ${MAX_ANSWER_BYTES} bytes)`
  } catch (error) {
    const cause = error instanceof Error && error.cause instanceof Error ? `: ${error.cause.message}` : ''
    return { status: undefined, outcome: 'error', detail: `${(error as Error).message}${cause}` }
  }
  let answer: unknown
  try {
    answer = JSON.parse(text)
  } catch {
    answer = undefined
  }
  const field = (value: unknown, key: string): unknown =>
    typeof value === 'object' && value !== null && key in value
      ? (value as Record<string, unknown>)[key]
      : undefined
  if (response.status === 200) {
    const status = field(answer, 'status')
    if (status === 'accepted' || status === 'duplicate') {
      return { status: 200, outcome: status, detail: `id=${String(field(answer, 'id'))}` }
    }
    return { status: 200, outcome: 'handshake', detail: text.slice(0, 200) }
  }
  const error = field(answer, 'error')
  const code = field(error, 'code')
  const message = field(error, 'message')
  return {
    status: response.status,
    outcome: 'error',
    detail: typeof code === 'string' ? `${code}: ${String(message)}` : text.slice(0, 200),
  }
}

function parseOptions(args: string[]) {
  const { values, positionals } = parseCommandLine({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      ...SIGNING_FLAGS,
      times: { type: 'string', default: '1' },
      concurrency: { type: 'string', default: '1' },
    },
  })
  if (values.source === undefined) throw usageError('needs --source')
  if (positionals.length === 0) throw usageError('needs at least one fixture FILE or DIR')
  const times = positiveInteger(values.times, '--times', 10_000)
  const concurrency = positiveInteger(values.concurrency, '--concurrency', 256)
  if (values.url !== undefined && !/^https?:\/\//.test(values.url))
    throw usageError('--url must be http(s)://…')
  return { ...values, source: values.source, paths: positionals, times, concurrency }
}

function positiveInteger(text: string, flag: string, max: number): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > max) {
    throw usageError(`${flag} must be an integer from 1 to ${max}`)
  }
  return Number(text)
}
