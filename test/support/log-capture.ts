import { Writable } from 'node:stream'
import { createLogger, type Logger } from '../../src/logger.js'

/** A real pino logger writing into memory, for tests that assert what is (and is not) logged. */
export function captureLogs(level = 'debug'): {
  logger: Logger
  entries: () => Array<Record<string, unknown>>
  text: () => string
} {
  const lines: string[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString())
      done()
    },
  })
  const text = () => lines.join('')
  const entries = () =>
    text()
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
  return { logger: createLogger(level, stream), entries, text }
}
