// The real service in a child process with one code handler that charges through the outbound
// ledger. A crash test arms `outbound.after_execute`: the process dies by SIGKILL after the mock
// payment service took the charge and before the ledger recorded it. Plain JavaScript on the built
// package, like crash-server.mjs.
import { defineTool, HandlerError, readEnvironment, startService } from 'hookledger'
import { postJson } from './post-json.mjs'

const env = readEnvironment(process.env)
const paymentsUrl = env.lookup('TEST_PAYMENTS_URL')
const effect = env.lookup('TEST_CHARGE_EFFECT')
if (paymentsUrl === undefined || (effect !== 'idempotent' && effect !== 'irreversible')) {
  throw new Error('TEST_PAYMENTS_URL and TEST_CHARGE_EFFECT (idempotent|irreversible) are required')
}

/** @type {import('hookledger').Tool<{ amount: number }, Record<string, unknown>>} */
const charge = defineTool({
  name: 'charge',
  effect,
  timeoutMs: 1000,
  execute: (args, ctx) =>
    postJson(
      `${paymentsUrl}/charges`,
      ctx.key,
      { amount: args.amount, reference: ctx.operationKey },
      ctx.signal,
    ),
  // Asks the payment service by our reference: the lookup by key the source document calls for.
  async reconcile(op) {
    const response = await fetch(`${paymentsUrl}/charges?reference=${encodeURIComponent(op.key)}`)
    if (!response.ok) return { kind: 'cannot_tell', evidence: { status: response.status } }
    const { data } = /** @type {{ data: Array<{ id: string }> }} */ (await response.json())
    const found = data[0]
    return found === undefined
      ? { kind: 'not_found', evidence: { query: op.key, matches: 0 } }
      : {
          kind: 'found',
          evidence: { query: op.key, matches: data.length, charge: found },
          result: found,
          downstreamId: found.id,
        }
  },
})

const service = await startService({
  env,
  tools: [charge],
  handlers: {
    acme: async ({ invoke }) => {
      const outcome = await invoke(charge, 'charge', { amount: 100 })
      if (outcome.kind !== 'completed') throw new HandlerError(`charge is ${outcome.kind}`)
    },
  },
})
process.once('SIGTERM', () => {
  void service.close().then(() => process.exit(0))
})
