import { createConnection, createServer, type Server, type Socket } from 'node:net'

/**
 * A TCP proxy of the test's own in front of a real server (PostgreSQL by default), for the faults a
 * network makes: `reset()` resets every live connection (an RST each way, as a failover or a
 * stateful firewall does), `blackhole()` keeps every socket open and forwards nothing, as a vanished
 * host or a NAT that lost its state does.
 */
export interface TcpProxy {
  /** 127.0.0.1:<port> of the proxy. */
  host: string
  port: number
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string
  /** Resets every live connection, both sides; new connections are forwarded as before. */
  reset(): number
  /**
   * A true blackhole: live connections stay open and their bytes, both ways, are swallowed from now
   * on (also after `forward()`: those flows are dead, as behind a NAT that lost them), and neither
   * side hears of the other closing while it lasts; new connections are accepted and never
   * forwarded until `forward()`. Returns how many live connections it swallowed.
   */
  blackhole(): number
  /**
   * New connections are forwarded again. A swallowed flow whose client has closed (now, or later)
   * has its server side closed too: once the path is back, the server's next keepalive probe on it
   * reaches a host that no longer knows the flow and is answered with a reset. Without this, each
   * blackhole would leave its flows' server sessions open for ever, which no network does.
   */
  forward(): void
  /** Connections made through the proxy so far. */
  connections(): number
  close(): Promise<void>
}

interface Flow {
  swallowed: boolean
  clientClosed: boolean
  upstream: Socket
}

export async function startTcpProxy(target = { host: '127.0.0.1', port: 5432 }): Promise<TcpProxy> {
  const live = new Set<Socket>()
  const flows = new Set<Flow>()
  let mode: 'forward' | 'blackhole' = 'forward'
  let accepted = 0
  const track = (socket: Socket) => {
    live.add(socket)
    socket.once('close', () => live.delete(socket))
    // A reset surfaces as ECONNRESET on the other side; here it is expected, not an error.
    socket.on('error', () => {})
  }
  const server: Server = createServer((client) => {
    accepted += 1
    track(client)
    if (mode === 'blackhole') {
      // Read and drop, so the client's writes are taken (as a silent network takes them).
      client.on('data', () => {})
      return
    }
    const upstream = createConnection(target)
    track(upstream)
    const flow: Flow = { swallowed: false, clientClosed: false, upstream }
    flows.add(flow)
    // By hand rather than pipe(): a swallowed flow keeps reading (and dropping) on both sides.
    client.on('data', (chunk: Buffer) => {
      if (!flow.swallowed) upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => {
      if (!flow.swallowed) client.write(chunk)
    })
    client.once('close', () => {
      flow.clientClosed = true
      if (!flow.swallowed || mode === 'forward') {
        flows.delete(flow)
        upstream.destroy()
      }
    })
    upstream.once('close', () => {
      if (!flow.swallowed) client.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  if (typeof address !== 'object' || address === null) throw new Error('the proxy has no address')
  const port = address.port
  return {
    host: '127.0.0.1',
    port,
    urlFor(url) {
      const proxied = new URL(url)
      proxied.hostname = '127.0.0.1'
      proxied.port = String(port)
      return proxied.toString()
    },
    reset() {
      const sockets = [...live]
      for (const socket of sockets) socket.resetAndDestroy()
      return sockets.length
    },
    blackhole() {
      mode = 'blackhole'
      let swallowed = 0
      for (const flow of flows) {
        if (!flow.swallowed) swallowed += 1
        flow.swallowed = true
      }
      return swallowed
    },
    forward() {
      mode = 'forward'
      for (const flow of flows) {
        if (flow.swallowed && flow.clientClosed) {
          flows.delete(flow)
          flow.upstream.destroy()
        }
      }
    },
    connections: () => accepted,
    close() {
      for (const socket of live) socket.destroy()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
