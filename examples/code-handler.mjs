// A code handler that writes through the handler's transaction, `ctx.tx`: the row commits together
// with the event's DONE mark or not at all, so a provider's retry, a failed attempt or a crash
// between the write and DONE never writes it twice.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop SHOP_WEBHOOK_SECRET=whsec_… \
//     node examples/code-handler.mjs
//
// Then send it a Standard Webhooks `invoice.paid` event at http://127.0.0.1:3000/webhooks/shop
// (REDIS_URL optional: unset, jobs run in this process's own queue).
import { sql } from 'drizzle-orm'
import { buildConfig, readEnvironment, startService } from 'hookledger'
import postgres from 'postgres'

const env = readEnvironment(process.env)
if (env.DATABASE_URL === undefined) throw new Error('set DATABASE_URL: the example keeps its table there')

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
  const { data } = /** @type {{ data: { id: string, amount: number } }} */ (event)
  await tx.execute(
    sql`insert into paid_invoices (event_id, invoice_id, amount) values (${eventId}, ${data.id}, ${data.amount})`,
  )
  logger.info({ invoice: data.id }, 'invoice recorded')
}

const service = await startService({ env, config, handlers: { shop: recordPaidInvoice } })
process.once('SIGTERM', () => {
  void service.close().then(() => process.exit(0))
})
