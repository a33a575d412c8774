// A code handler that writes through the handler's transaction, `ctx.tx`: the row commits together
// with the event's DONE mark or not at all, so a provider's retry, a failed attempt or a crash
// between the write and DONE never writes it twice.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop SHOP_WEBHOOK_SECRET=whsec_… \
//     node examples/code-handler.mjs
//
// Then send it a Standard Webhooks `invoice.paid` event with `data.id` and `data.amount` at
// http://127.0.0.1:3001/webhooks/shop (the README has a snippet). REDIS_URL is optional: unset, jobs
// run in this process's own queue.
import { sql } from 'drizzle-orm'
import {
  buildConfig,
  createLogger,
  HandlerError,
  migrateLedger,
  readEnvironment,
  startService,
} from 'hookledger'
import postgres from 'postgres'

// Port 3001 unless PORT says otherwise, so the example runs beside `npm start` on 3000.
const env = readEnvironment({ PORT: '3001', ...process.env })
if (env.DATABASE_URL === undefined) throw new Error('set DATABASE_URL: the example keeps its table there')

// The ledger first: this creates the database when the server has none by that name yet.
await migrateLedger(env.DATABASE_URL, createLogger('warn'))

// The example's own table, beside the ledger's. Its primary key is the event id, so even code that
// skipped `tx` would be caught; with `tx` the key is never hit.
const admin = postgres(env.DATABASE_URL, { max: 1, onnotice: () => {} })
await admin`create table if not exists paid_invoices (
  event_id text primary key, invoice_id text not null, amount integer not null)`
await admin.end()

// The source lives in code here; a config file works the same (`hookledger.config.json` without a
// `handler`, since the handler is this function).
const config = buildConfig(
  {
    sources: [{ id: 'shop', verify: { scheme: 'standard-webhooks', secrets: ['env:SHOP_WEBHOOK_SECRET'] } }],
  },
  env.lookup,
)

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
process.once('SIGTERM', () => {
  void service.close().then(() => process.exit(0))
})
