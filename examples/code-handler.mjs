// A code handler that writes through the handler's transaction, `ctx.tx`: the row commits together
// with the event's DONE mark or not at all, so a provider's retry, a failed attempt or a crash
// between the write and DONE never writes it twice.
//
//   node examples/code-handler.mjs
//
// needs no server: without DATABASE_URL it runs in embedded mode, on a data folder of its own
// (./.hookledger-code-handler, so it runs beside `npm start`), with the example source's secret
// from ./example.env. With your own PostgreSQL:
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop node examples/code-handler.mjs
//
// Then send it a Standard Webhooks `invoice.paid` event with `data.id` and `data.amount` at
// http://127.0.0.1:3001/webhooks/shop (the README has a snippet). REDIS_URL is optional: unset, jobs
// run in this process's own queue. Ctrl-C stops it cleanly (the embedded PostgreSQL with it).
import { readFileSync } from 'node:fs'
import { parseEnv } from 'node:util'
import { sql } from 'drizzle-orm'
import {
  buildConfig,
  ConfigError,
  createLogger,
  EnvironmentError,
  HandlerError,
  migrateLedger,
  readEnvironment,
  startService,
} from 'hookledger'
import postgres from 'postgres'

// Port 3001 and a data folder of its own unless PORT and HOOKLEDGER_DATA_DIR say otherwise, so the
// example runs beside `npm start` (port 3000, ./.hookledger). The secret is example.env's.
const env = startupStep(() =>
  readEnvironment({
    PORT: '3001',
    HOOKLEDGER_DATA_DIR: './.hookledger-code-handler',
    ...exampleEnvFile(),
    ...process.env,
  }),
)

/** The example source's secret from ./example.env, as `npm start` reads it; the environment wins. */
function exampleEnvFile() {
  try {
    const { EXAMPLE_WEBHOOK_SECRET } = parseEnv(readFileSync('example.env', 'utf8'))
    return EXAMPLE_WEBHOOK_SECRET === undefined ? {} : { SHOP_WEBHOOK_SECRET: EXAMPLE_WEBHOOK_SECRET }
  } catch {
    return {}
  }
}

// With DATABASE_URL, the ledger first: this creates the database when the server has none by that
// name yet. In embedded mode startService starts the server, and migrates it, itself.
if (env.DATABASE_URL !== undefined) await migrateLedger(env.DATABASE_URL, createLogger('warn'))

// The source lives in code here; a config file works the same (`hookledger.config.json` without a
// `handler`, since the handler is this function).
const config = startupStep(() =>
  buildConfig(
    {
      sources: [
        { id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_WEBHOOK_SECRET'] } },
      ],
    },
    env.lookup,
  ),
)

/**
 * A bad secret or setting is the reader's to fix from the message: one line and exit 1, as the
 * CLI does, not a stack trace. Anything else is thrown on.
 * @template T
 * @param {() => T} step
 * @returns {T}
 */
function startupStep(step) {
  try {
    return step()
  } catch (error) {
    if (error instanceof ConfigError || error instanceof EnvironmentError) {
      console.error(`code-handler example: ${error.message.replaceAll(/\n\s*-?\s*/g, ' ')}`)
      process.exit(1)
    }
    throw error
  }
}

/** @type {import('hookledger').EventHandler} */
async function recordPaidInvoice({ eventId, eventType, event, tx, logger }) {
  if (eventType !== 'invoice.paid') return
  const { data } = /** @type {{ data?: { id?: unknown, amount?: unknown } }} */ (event)
  // The sender's JSON is checked before it reaches SQL: a missing amount would otherwise arrive as a
  // statement error nobody can read. The attempt fails with this message on its record.
  if (typeof data?.id !== 'string' || !Number.isInteger(data.amount)) {
    throw new HandlerError('invoice.paid needs data.id (a string) and data.amount (an integer)')
  }
  await tx.execute(
    sql`insert into paid_invoices (event_id, invoice_id, amount) values (${eventId}, ${data.id}, ${data.amount})`,
  )
  logger.info({ invoice: data.id }, 'invoice recorded')
}

const service = await startService({ env, config, handlers: { shop: recordPaidInvoice } })

// The example's own table, beside the ledger's, on the PostgreSQL the service uses (embedded or
// DATABASE_URL). Its primary key is the event id, so even code that skipped `tx` would be caught;
// with `tx` the key is never hit. An event that arrived in the moment before it existed fails its
// first attempt and is retried a second later.
const admin = postgres(service.databaseUrl, { max: 1, onnotice: () => {} })
await admin`create table if not exists paid_invoices (
  event_id text primary key, invoice_id text not null, amount integer not null)`
await admin.end()
console.log(`code-handler example: POST Standard Webhooks deliveries to ${service.url}/webhooks/shop`)

// Ctrl-C (SIGINT) as well as SIGTERM: close() lets running handlers finish and stops an embedded
// PostgreSQL, where dying at once would leave it for the next start to clean up.
for (const signal of /** @type {const} */ (['SIGINT', 'SIGTERM'])) {
  process.once(signal, () => {
    void service.close().then(() => process.exit(0))
  })
}
