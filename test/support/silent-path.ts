import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'

/**
 * A path that goes silent for real, in the kernel: an nftables table of the test's own drops every
 * packet between PostgreSQL's port and the given client ports on loopback, both ways. Unlike the
 * TCP proxy's blackhole (tcp-proxy.ts), whose kernel still answers the server's keepalive probes,
 * nothing here answers anything: what a NAT or firewall that dropped the flow does. Needs root and
 * Debian's nftables (npm test's pretest installs it).
 */
export interface SilentPath {
  /** Lets the packets through again (the table is removed). */
  heal(): void
}

const NFT = '/usr/sbin/nft'

export function silencePostgresPorts(clientPorts: readonly number[], serverPort = 5432): SilentPath {
  if (clientPorts.length === 0) throw new Error('no client ports to silence')
  const table = `hookledger_test_${randomBytes(4).toString('hex')}`
  const ports = clientPorts.join(', ')
  const ruleset = [
    `table inet ${table} {`,
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    `    iif "lo" tcp sport ${serverPort} tcp dport { ${ports} } drop`,
    `    iif "lo" tcp dport ${serverPort} tcp sport { ${ports} } drop`,
    '  }',
    '}',
  ].join('\n')
  execFileSync(NFT, ['-f', '-'], { input: ruleset, stdio: ['pipe', 'ignore', 'pipe'] })
  let healed = false
  return {
    heal() {
      if (healed) return
      healed = true
      execFileSync(NFT, ['delete', 'table', 'inet', table], { stdio: 'ignore' })
    },
  }
}
