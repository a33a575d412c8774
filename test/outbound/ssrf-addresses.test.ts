import { describe, expect, it } from 'vitest'
import { checkDestination, isNonPublicAddress } from '../../src/outbound/ssrf.js'

/** Address → verdict. Every refused line names why; the allowed ones are ordinary public hosts. */
const ADDRESSES: ReadonlyArray<readonly [string, 'allowed' | 'refused']> = [
  // Public, must stay reachable.
  ['8.8.8.8', 'allowed'],
  ['1.1.1.1', 'allowed'],
  ['93.184.215.14', 'allowed'],
  ['151.101.1.69', 'allowed'],
  ['2606:4700:4700::1111', 'allowed'],
  ['2001:4860:4860::8888', 'allowed'],
  ['2a00:1450:4001:80e::200e', 'allowed'],
  ['::ffff:8.8.8.8', 'allowed'], // IPv4-mapped public
  ['64:ff9b::808:808', 'allowed'], // NAT64 of a public address
  ['2002:808:808::1', 'allowed'], // 6to4 of a public address
  // IPv4 special-purpose.
  ['0.0.0.0', 'refused'],
  ['10.1.2.3', 'refused'],
  ['100.100.100.200', 'refused'], // CGNAT, a cloud metadata address
  ['127.0.0.1', 'refused'],
  ['127.255.255.254', 'refused'],
  ['169.254.169.254', 'refused'], // metadata
  ['172.16.0.1', 'refused'],
  ['172.31.255.255', 'refused'],
  ['192.0.0.8', 'refused'],
  ['192.0.2.10', 'refused'], // TEST-NET-1
  ['198.51.100.7', 'refused'], // TEST-NET-2
  ['203.0.113.9', 'refused'], // TEST-NET-3
  ['192.168.1.1', 'refused'],
  ['198.18.0.1', 'refused'], // benchmarking
  ['224.0.0.1', 'refused'],
  ['240.0.0.1', 'refused'],
  ['255.255.255.255', 'refused'],
  // IPv6 special-purpose.
  ['::', 'refused'],
  ['::1', 'refused'],
  ['fe80::1', 'refused'],
  ['fd00:ec2::254', 'refused'], // unique local, a metadata address
  ['fc00::1', 'refused'],
  ['ff02::1', 'refused'],
  ['2001:db8::1', 'refused'], // documentation
  ['3fff::1', 'refused'], // documentation (RFC 9637)
  ['100::1', 'refused'], // discard
  // IPv4 smuggled inside IPv6.
  ['::ffff:127.0.0.1', 'refused'], // IPv4-mapped loopback
  ['::ffff:169.254.169.254', 'refused'],
  ['::ffff:0:7f00:1', 'refused'], // IPv4-translated loopback (RFC 6145)
  ['::127.0.0.1', 'refused'], // IPv4-compatible loopback
  ['::8.8.8.8', 'refused'], // IPv4-compatible is deprecated: refused whatever it embeds
  ['2002:7f00:1::', 'refused'], // 6to4 of loopback
  ['2002:a00:1::1', 'refused'], // 6to4 of 10.0.0.1
  ['2002:a9fe:a9fe::', 'refused'], // 6to4 of the metadata address
  ['64:ff9b::7f00:1', 'refused'], // NAT64 of loopback
  ['64:ff9b::a9fe:a9fe', 'refused'], // NAT64 of the metadata address
  ['64:ff9b:1::7f00:1', 'refused'], // local-use NAT64 (RFC 8215)
  ['64:ff9b:1::808:808', 'refused'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'refused'], // Teredo
  // Not an address at all.
  ['not-an-ip', 'refused'],
]

describe('SSRF address table', () => {
  it.each(ADDRESSES)('%s is %s', (address, verdict) => {
    expect(isNonPublicAddress(address) ? 'refused' : 'allowed').toBe(verdict)
  })

  it.each([
    'http://[2002:7f00:1::]/',
    'http://[::ffff:0:7f00:1]/',
    'http://[::127.0.0.1]/',
    'http://[64:ff9b:1::7f00:1]/',
    'http://[2001:db8::1]/',
    'http://192.0.2.1/',
  ])('checkDestination refuses the URL %s', (url) => {
    expect(() => checkDestination(new URL(url))).toThrow(/loopback, private, link-local or metadata/)
  })

  it('checkDestination lets a public literal through', () => {
    expect(() => checkDestination(new URL('https://[2606:4700:4700::1111]/hook'))).not.toThrow()
    expect(() => checkDestination(new URL('https://8.8.8.8/hook'))).not.toThrow()
  })
})
