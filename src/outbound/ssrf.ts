import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns'
import { isIP } from 'node:net'
import ipaddr from 'ipaddr.js'

/**
 * Destinations an argument-supplied URL may not reach: an agent (or whoever steers it) must not turn
 * a tool into a way into the private network or the cloud metadata service.
 *
 * The range table is ipaddr.js's (IANA special-purpose registries, maintained upstream): an address
 * is public only when ipaddr.js calls it plain `unicast`. Loopback, private, link-local, CGNAT
 * (100.100.100.200 is a metadata address), documentation, benchmarking, reserved, multicast and
 * unique-local (fd00:ec2::254) all fall outside it.
 */
const PUBLIC_RANGE = 'unicast'

/**
 * IPv6 ranges that carry an IPv4 address a gateway or the kernel may deliver to: the address is as
 * public as the IPv4 inside it (`::ffff:127.0.0.1` reaches loopback on a dual-stack socket,
 * `2002:7f00:1::` and `64:ff9b::7f00:1` reach it through a 6to4 relay or a NAT64).
 */
const EMBEDDED_IPV4: ReadonlyArray<{ network: ipaddr.IPv6; prefix: number; ipv4At: number }> = [
  { network: ipaddr.IPv6.parse('::ffff:0:0'), prefix: 96, ipv4At: 12 }, // IPv4-mapped
  { network: ipaddr.IPv6.parse('::ffff:0:0:0'), prefix: 96, ipv4At: 12 }, // IPv4-translated (RFC 6145)
  { network: ipaddr.IPv6.parse('64:ff9b::'), prefix: 96, ipv4At: 12 }, // NAT64 well-known (RFC 6052)
  { network: ipaddr.IPv6.parse('2002::'), prefix: 16, ipv4At: 2 }, // 6to4 (RFC 3056)
]

/**
 * Refused whatever they embed: IPv4-compatible `::a.b.c.d` is deprecated (RFC 4291 §2.5.5.1) and
 * `::127.0.0.1` must not slip through as "unicast"; the local-use NAT64 prefix (RFC 8215) and Teredo
 * translate to addresses that only the local network defines.
 */
const ALWAYS_REFUSED: ReadonlyArray<{ network: ipaddr.IPv6; prefix: number }> = [
  { network: ipaddr.IPv6.parse('::'), prefix: 96 },
  { network: ipaddr.IPv6.parse('64:ff9b:1::'), prefix: 48 },
  { network: ipaddr.IPv6.parse('2001::'), prefix: 32 },
]

export class DestinationRefusedError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'DestinationRefusedError'
  }
}

/** True for loopback, private, link-local, metadata, documentation and other non-public addresses. */
export function isNonPublicAddress(address: string): boolean {
  const family = isIP(address)
  if (family === 0) return true
  const parsed = family === 4 ? ipaddr.IPv4.parse(address) : parseIPv6(address)
  if (parsed === undefined) return true
  if (parsed instanceof ipaddr.IPv4) return parsed.range() !== PUBLIC_RANGE
  if (ALWAYS_REFUSED.some(({ network, prefix }) => parsed.match(network, prefix))) return true
  const carrier = EMBEDDED_IPV4.find(({ network, prefix }) => parsed.match(network, prefix))
  if (carrier !== undefined) {
    const bytes = parsed.toByteArray().slice(carrier.ipv4At, carrier.ipv4At + 4)
    return new ipaddr.IPv4(bytes).range() !== PUBLIC_RANGE
  }
  return parsed.range() !== PUBLIC_RANGE
}

/**
 * ipaddr.js reads a dotted tail as IPv4-mapped (`::8.8.8.8` becomes `::ffff:808:808`), so the
 * address is first written in hex the way the URL parser (and the kernel) reads it. Zone ids and
 * anything else the URL parser rejects are not destinations.
 */
function parseIPv6(address: string): ipaddr.IPv6 | undefined {
  try {
    return ipaddr.IPv6.parse(new URL(`http://[${address}]/`).hostname.slice(1, -1))
  } catch {
    return undefined
  }
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
