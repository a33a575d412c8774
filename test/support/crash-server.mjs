// The real service in a child process, with a code handler whose effects a crash test can count:
// a row written through the handler's transaction (exactly once, or the invariant broke) and a line
// appended to a file on every invocation (how often the handler actually ran, across processes).
// Plain JavaScript on the built package (`hookledger` is this package's dist/), so a child starts
// without compiling TypeScript; `npm run typecheck` still checks it against src/.
import { appendFileSync } from 'node:fs'
import { sql } from 'drizzle-orm'
import { readEnvironment, startService } from 'hookledger'

const invocationLog = process.env.TEST_INVOCATION_LOG
if (invocationLog === undefined) throw new Error('TEST_INVOCATION_LOG is required')

const service = await startService({
  env: readEnvironment(process.env),
  // The role a test asks for: a backlog taken by an api-only process, then a worker.
  role: /** @type {'all' | 'api' | 'worker'} */ (process.env.TEST_ROLE ?? 'all'),
  handlers: {
    acme: async ({ eventId, tx, attempt }) => {
      appendFileSync(invocationLog, `${eventId} ${attempt}\n`)
      await tx.execute(sql`insert into handler_effects (event_id) values (${eventId})`)
    },
  },
})
process.once('SIGTERM', () => {
  void service.close().then(() => process.exit(0))
})
