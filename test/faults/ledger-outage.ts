import { afterAll, beforeAll } from 'vitest'
import type { Role } from '../../src/service/service.js'
import { adminDatabaseUrl } from '../support/env.js'
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js'
import { FAULT_TOLERANT, serviceHarness } from '../support/service.js'
import { TEST_SECRET } from '../support/signing.js'
import { startSink } from '../support/sink.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

/**
 * The PostgreSQL fault tests' setup: the real service in a child process, forwarding source `acme`
 * to a sink, its ledger behind a TCP proxy the test resets or blackholes. Called at a file's top
 * level or in a `describe`. With `pgbouncer`, the service reaches the proxy through a PgBouncer of the
 * test's own in transaction mode (service → PgBouncer → proxy → PostgreSQL): the fault then hits
 * PgBouncer's server connections while the service's own connections to PgBouncer stay up.
 */
export function serviceBehindProxy(folder: string, options: { pgbouncer?: boolean } = {}) {
  let proxy: TcpProxy | undefined
  let bouncer: PgBouncer | undefined
  let sink: Awaited<ReturnType<typeof startSink>> | undefined
  beforeAll(async () => {
    proxy = await startTcpProxy()
    if (options.pgbouncer) {
      const user = decodeURIComponent(new URL(adminDatabaseUrl()).username) || 'postgres'
      bouncer = await startPgBouncer({ upstream: proxy, user })
    }
    sink = await startSink(() => ({ status: 200, body: 'ok' }))
  })
  afterAll(async () => {
    await bouncer?.close()
    await proxy?.close()
    await sink?.close()
  })
  const made = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the proxy and the sink are made in beforeAll')
    return value
  }
  const harness = serviceHarness({
    folder,
    config: () => ({
      sources: [
        {
          id: 'acme',
          verify: { scheme: 'standard-webhooks', secrets: [TEST_SECRET] },
          handler: { type: 'forward', url: made(sink).url, timeoutMs: 1000 },
        },
      ],
      ...FAULT_TOLERANT,
    }),
    env: { LOG_LEVEL: 'warn' },
  })
  return {
    harness,
    get proxy() {
      return made(proxy)
    },
    get sink() {
      return made(sink)
    },
    /** PgBouncer's log so far (folded), for a failure message; empty without one. */
    pgbouncerLog: () => bouncer?.log() ?? '',
    /** `hookledger serve --role <role>`, its DATABASE_URL through the proxy (and PgBouncer, if any). */
    start(role: Role) {
      const url = made(proxy).urlFor(harness.database.url)
      return harness.startChild({
        entry: ['bin/hookledger.js', 'serve', '--role', role],
        env: { DATABASE_URL: bouncer === undefined ? url : bouncer.urlFor(url) },
      })
    },
  }
}
