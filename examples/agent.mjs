// An agent, in any language, guarding a side effect with hookledger's ledger over HTTP: claim the
// operation under a key that stays the same however often the agent is re-run, act only when told
// `execute`, then report the outcome. A second run finds the operation completed and does nothing.
//
//   HOOKLEDGER_URL=http://127.0.0.1:3000 AGENT_TOKEN=… node examples/agent.mjs ORDER_ID
const base = process.env.HOOKLEDGER_URL ?? 'http://127.0.0.1:3000'
const token = process.env.AGENT_TOKEN
const orderId = process.argv[2]
if (token === undefined || orderId === undefined) {
  throw new Error('usage: HOOKLEDGER_URL=… AGENT_TOKEN=… node examples/agent.mjs ORDER_ID')
}

/**
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<Record<string, unknown>>}
 */
async function operations(path, body) {
  const response = await fetch(`${base}/v1/operations${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const answer = /** @type {Record<string, unknown>} */ (await response.json())
  if (!response.ok) throw new Error(`${path}: ${response.status} ${JSON.stringify(answer)}`)
  return answer
}

/**
 * The side effect: here a line on stdout; in real life the call to the mail provider, which gets
 * the ledger's idempotency key so that it can drop a repeat too.
 * @param {string} order
 * @param {unknown} idempotencyKey
 */
async function sendReceipt(order, idempotencyKey) {
  console.log(`sent the receipt for order ${order} (Idempotency-Key ${idempotencyKey})`)
  return { messageId: `receipt-${order}` }
}

const key = `receipt:${orderId}`
const claim = await operations('/claim', {
  key,
  tool: 'send_receipt',
  // Sending an email cannot be undone: on an unknown outcome hookledger never re-sends it on its own.
  effect: 'irreversible',
  args: { orderId },
})
switch (claim.decision) {
  case 'execute': {
    const result = await sendReceipt(orderId, claim.idempotencyKey)
    const settled = await operations(`/${encodeURIComponent(key)}/outcome`, {
      leaseToken: claim.leaseToken,
      attempt: claim.attempt,
      outcome: 'success',
      result,
    })
    console.log(`recorded: ${settled.decision}`)
    break
  }
  case 'completed':
    console.log(`already done: ${JSON.stringify(claim.result)}`)
    break
  default:
    // escalated (a person decides), exhausted, failed, abandoned: report it, never act.
    console.log(`not sent: ${claim.decision}`)
}
const { status } = await operations(`/${encodeURIComponent(key)}`)
console.log(`operation ${key} is ${status}`)
