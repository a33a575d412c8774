import { getConnInfo } from '@hono/node-server/conninfo'
import type { Context } from 'hono'

/** Failed logins a client may make per window before it has to wait for the window to pass. */
export const LOGIN_FAILURES_ALLOWED = 5
export const LOGIN_WINDOW_MS = 15 * 60 * 1000
// The map is bounded: a flood from many addresses must not grow memory without limit. Past this,
// the oldest windows are forgotten first (their clients get a fresh window, not a free pass forever).
const MAX_TRACKED_CLIENTS = 10_000

interface Window {
  startedAt: number
  failures: number
}

export interface LoginThrottle {
  /** Seconds the client must wait before trying again, or undefined when it may try now. */
  retryAfterSeconds(client: string): number | undefined
  recordFailure(client: string): void
  recordSuccess(client: string): void
}

/**
 * Failed admin logins per client, in this process's memory (each process of a deployment counts its
 * own). A correct token is refused too while the client is throttled: otherwise guessing would go on
 * at full speed and only the answers would differ.
 */
export function loginThrottle(now: () => number = () => Date.now()): LoginThrottle {
  const windows = new Map<string, Window>()
  const current = (client: string): Window | undefined => {
    const window = windows.get(client)
    if (window === undefined) return undefined
    if (now() - window.startedAt >= LOGIN_WINDOW_MS) {
      windows.delete(client)
      return undefined
    }
    return window
  }
  return {
    retryAfterSeconds(client) {
      const window = current(client)
      if (window === undefined || window.failures < LOGIN_FAILURES_ALLOWED) return undefined
      return Math.max(1, Math.ceil((window.startedAt + LOGIN_WINDOW_MS - now()) / 1000))
    },
    recordFailure(client) {
      const window = current(client)
      if (window !== undefined) {
        window.failures += 1
        return
      }
      if (windows.size >= MAX_TRACKED_CLIENTS) {
        const oldest = windows.keys().next().value
        if (oldest !== undefined) windows.delete(oldest)
      }
      windows.set(client, { startedAt: now(), failures: 1 })
    },
    recordSuccess(client) {
      windows.delete(client)
    },
  }
}

/**
 * The client a login comes from: the socket's address, an IPv6 one by its /64 (one host usually
 * holds a whole /64, so counting single addresses would let it rotate through them). Behind a
 * reverse proxy every client shares the proxy's address; X-Forwarded-For is not trusted, since
 * anyone can send it.
 */
export function loginClient(c: Context): string {
  let address: string | undefined
  try {
    address = getConnInfo(c).remote.address
  } catch {
    // Requests made in-process (app.request) have no socket.
    address = undefined
  }
  if (address === undefined) return 'unknown'
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  if (mapped?.[1] !== undefined) return mapped[1]
  if (!address.includes(':')) return address
  return `${expandIpv6(address).slice(0, 4).join(':')}::/64`
}

function expandIpv6(address: string): string[] {
  const [head = '', tail] = address.split('::')
  const left = head === '' ? [] : head.split(':')
  const right = tail === undefined || tail === '' ? [] : tail.split(':')
  const zeros = Array.from({ length: Math.max(0, 8 - left.length - right.length) }, () => '0')
  return [...left, ...(tail === undefined ? [] : zeros), ...right].map((part) => part.toLowerCase())
}
