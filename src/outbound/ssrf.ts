import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns'
import { BlockList, isIP } from 'node:net'

/**
 * Destinations an argument-supplied URL may not reach: an agent (or whoever steers it) must not turn
 * a tool into a way into the private network or the cloud metadata service.
 */
const blocked = new BlockList()
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this network"; 0.0.0.0 reaches the local host on Linux
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT; 100.100.100.200 is a cloud metadata address
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, with 169.254.169.254 (metadata)
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(network, prefix, 'ipv4')
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96], // NAT64 can map onto private IPv4
  ['fc00::', 7], // unique local, with fd00:ec2::254 (metadata)
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  blocked.addSubnet(network, prefix, 'ipv6')
}

export class DestinationRefusedError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'DestinationRefusedError'
  }
}

/** True for loopback, private, link-local, metadata and other non-public addresses. */
export function isNonPublicAddress(address: string): boolean {
  const family = isIP(address)
  if (family === 4) return blocked.check(address, 'ipv4')
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1]
    if (mapped !== undefined) return blocked.check(mapped, 'ipv4')
    return blocked.check(address, 'ipv6')
  }
  return true
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase()
}

export function isAllowListed(url: URL, allowHosts: readonly string[]): boolean {
  const host = hostOf(url)
  return allowHosts.some(
    (allowed) => allowed.toLowerCase() === host || allowed.toLowerCase() === url.host.toLowerCase(),
  )
}

/**
 * A `lookup` for node:http that refuses non-public addresses at connect time, so a name that
 * resolves to a public address when checked and a private one when connecting (DNS rebinding)
 * is still refused. IP literals never reach a lookup: `checkDestination` covers them.
 */
export function guardedLookup(
  hostname: string,
  options: LookupOptions,
  callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
): void {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error !== null) return callback(error, [])
    const refused = addresses.find((a) => isNonPublicAddress(a.address))
    if (refused !== undefined) {
      return callback(
        new DestinationRefusedError(`${hostname} resolves to non-public address ${refused.address}`),
        [],
      )
    }
    if (options.all === true) return callback(null, addresses)
    const first = addresses[0]
    if (first === undefined) return callback(new DestinationRefusedError(`${hostname} has no address`), [])
    callback(null, first.address, first.family)
  })
}

/** Refuses a URL that is not http(s) or that points at a literal non-public address. */
export function checkDestination(url: URL): void {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new DestinationRefusedError(`only http and https destinations are allowed, not ${url.protocol}`)
  }
  const host = hostOf(url)
  if (isIP(host) !== 0 && isNonPublicAddress(host)) {
    throw new DestinationRefusedError(`${host} is a loopback, private, link-local or metadata address`)
  }
  if (host === 'localhost' || host.endsWith('.localhost')) {
    throw new DestinationRefusedError(`${host} is the local host`)
  }
}
