// The real service in a child process, with a code handler whose effects a crash test can count:
// a row written through the handler's transaction (exactly once, or the invariant broke) and a line
// appended to a file on every invocation (how often the handler actually ran, across processes).
import { appendFileSync } from 'node:fs'
import { sql } from 'drizzle-orm'
import { readEnvironment } from '../../src/config/env.js'
import { type Role, startService } from '../../src/service/service.js'

const invocationLog = process.env.TEST_INVOCATION_LOG
if (invocationLog === undefined) throw new Error('TEST_INVOCATION_LOG is required')

const service = await startService({
  env: readEnvironment(process.env),
  role: (process.env.TEST_ROLE ?? 'all') as Role,
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
