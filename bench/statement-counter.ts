// A TCP proxy in front of PostgreSQL that counts the statements its clients run: every Execute
// ('E', the extended protocol postgres-js uses) and every simple Query ('Q'), in all and by the
// statement's text (an Execute runs the portal a Bind made from a statement a Parse named). It reads
// only the client-to-server direction and forwards every byte unchanged.
import { createConnection, createServer, type Server, type Socket } from 'node:net'

const PARSE = 0x50
const BIND = 0x42
const EXECUTE = 0x45
const QUERY = 0x51
const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104

export interface StatementCounter {
  port: number
  statements(): number
  /** Statements run so far by their text (whitespace collapsed). */
  byText(): Map<string, number>
  close(): Promise<void>
}

export async function startStatementCounter(target: {
  host: string
  port: number
}): Promise<StatementCounter> {
  let statements = 0
  const byText = new Map<string, number>()
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const upstream = createConnection(target)
    sockets.add(client).add(upstream)
    // This connection's prepared statements and portals, by name: their text.
    const prepared = new Map<string, string>()
    const portals = new Map<string, string>()
    const ran = (text: string | undefined) => {
      statements += 1
      const key = text ?? '(unknown)'
      byText.set(key, (byText.get(key) ?? 0) + 1)
    }
    const count = messageCounter((type, body) => {
      const [first = '', second = ''] = cStrings(body, 2)
      if (type === PARSE) prepared.set(first, second.replace(/\s+/g, ' ').trim())
      else if (type === BIND) portals.set(first, prepared.get(second) ?? '(unknown)')
      else if (type === EXECUTE) ran(portals.get(first))
      else if (type === QUERY) ran(first.replace(/\s+/g, ' ').trim())
    })
    client.on('data', (chunk: Buffer) => {
      count(chunk)
      upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => client.write(chunk))
    const close = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('close', close).on('error', close)
    upstream.on('close', close).on('error', close)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  if (typeof address !== 'object' || address === null) throw new Error('the counter has no port')
  return {
    port: address.port,
    statements: () => statements,
    byText: () => new Map(byText),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  }
}

/**
 * Splits a client's byte stream into protocol messages. The first messages (SSL or GSS request,
 * then the startup message) have no type byte: a 4-byte length, then a 4-byte code.
 */
function messageCounter(onMessage: (type: number, body: Buffer) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0)
  let typed = false
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
    for (;;) {
      if (!typed) {
        if (pending.length < 8) return
        const length = pending.readInt32BE(0)
        if (pending.length < length) return
        const code = pending.readInt32BE(4)
        if (code !== SSL_REQUEST && code !== GSSENC_REQUEST) typed = true
        pending = pending.subarray(length)
        continue
      }
      if (pending.length < 5) return
      const length = pending.readInt32BE(1)
      if (pending.length < length + 1) return
      onMessage(pending[0] ?? 0, pending.subarray(5, length + 1))
      pending = pending.subarray(length + 1)
    }
  }
}

/** The first `count` NUL-terminated strings of a message body. */
function cStrings(body: Buffer, count: number): string[] {
  const strings: string[] = []
  let at = 0
  while (strings.length < count && at < body.length) {
    const end = body.indexOf(0, at)
    if (end < 0) break
    strings.push(body.toString('utf8', at, end))
    at = end + 1
  }
  return strings
}
