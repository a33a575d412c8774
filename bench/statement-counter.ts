// A TCP proxy in front of PostgreSQL that counts the statements its clients run: every Execute
// ('E', the extended protocol postgres-js uses) and every simple Query ('Q'). It reads only the
// client-to-server direction and forwards every byte unchanged.
import { createConnection, createServer, type Server, type Socket } from 'node:net'

const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104

export interface StatementCounter {
  port: number
  statements(): number
  close(): Promise<void>
}

export async function startStatementCounter(target: {
  host: string
  port: number
}): Promise<StatementCounter> {
  let statements = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const upstream = createConnection(target)
    sockets.add(client).add(upstream)
    const count = messageCounter((type) => {
      if (type === 0x45 || type === 0x51) statements += 1
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
function messageCounter(onMessage: (type: number) => void): (chunk: Buffer) => void {
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
      onMessage(pending[0] ?? 0)
      pending = pending.subarray(length + 1)
    }
  }
}
