// A test of your own receiver with `hookledger/testing`: sign a delivery the way the provider does,
// send it twice, and check its effect happened once. It runs on node's own test runner:
//
//   node --test examples/receiver.test.mjs
//
// needs no server: without DATABASE_URL it runs in embedded mode on a data folder of its own
// (./.hookledger-receiver-test), never the dev ledger that `npm start` owns, so it runs beside it and
// leaves its test rows out of it. With your own PostgreSQL, give it a database of its own:
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop_test node --test examples/receiver.test.mjs
//
// (the database is created if missing; REDIS_URL optional).
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'
import { buildConfig, readEnvironment, startService } from 'hookledger'
import { signDelivery } from 'hookledger/testing'

const SECRET = 'whsec_dGVzdC1zZWNyZXQtZm9yLWhvb2tsZWRnZXItdGVzdHM='
/** @type {string[]} */
const paidInvoices = []
/** @type {import('hookledger').Service} */
let service

before(async () => {
  // Port 0: any free port, so tests never collide; the handler is the code under test.
  const env = readEnvironment({
    HOOKLEDGER_DATA_DIR: './.hookledger-receiver-test',
    ...process.env,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
  })
  const config = buildConfig(
    { sources: [{ id: 'stripe', verify: { scheme: 'stripe', secrets: [SECRET] } }] },
    env.lookup,
  )
  service = await startService({
    env,
    config,
    handlers: {
      stripe: async ({ event }) => {
        paidInvoices.push(/** @type {{ data: { object: { id: string } } }} */ (event).data.object.id)
      },
    },
  })
})
after(() => service.close())

test('a Stripe delivery and its retry are processed once', async () => {
  const body = JSON.stringify({
    id: `evt_${Date.now()}`,
    type: 'invoice.paid',
    data: { object: { id: 'in_1' } },
  })
  for (let delivery = 0; delivery < 2; delivery += 1) {
    const response = await fetch(`${service.url}/webhooks/stripe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...signDelivery('stripe', SECRET, body) },
      body,
    })
    assert.equal(response.status, 200)
    const answer = /** @type {{ status: string }} */ (await response.json())
    assert.equal(answer.status, delivery === 0 ? 'accepted' : 'duplicate')
  }
  // The worker runs the handler after the 200; wait for it, bounded.
  for (let tries = 0; paidInvoices.length === 0 && tries < 100; tries += 1) {
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  assert.deepEqual(paidInvoices, ['in_1'])
})

test('a delivery signed with another secret is refused with 401', async () => {
  const body = JSON.stringify({ id: 'evt_forged', type: 'invoice.paid', data: { object: { id: 'in_2' } } })
  const response = await fetch(`${service.url}/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...signDelivery('stripe', 'whsec_not_the_secret', body) },
    body,
  })
  assert.equal(response.status, 401)
})
