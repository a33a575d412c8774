// The full path: hookledger's service (api + worker + relay) with a handler that does nothing, so
// the figures measure the receiver and the ledger, not a destination.
import { readEnvironment } from '../src/config/env.js'
import { startService } from '../src/service/service.js'

const service = await startService({
  env: readEnvironment(process.env),
  handlers: { bench: async () => {} },
  role: (process.env.BENCH_ROLE as 'all' | 'api' | undefined) ?? 'all',
})
process.once('SIGTERM', () => {
  void service.close().then(() => process.exit(0))
})
