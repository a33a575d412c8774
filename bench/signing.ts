// Signed Standard Webhooks deliveries for the bench: unique ids, ~1 KB bodies like a typical
// provider event, signed with node:crypto so the generator costs little of the shared CPU.
import { createHmac, randomBytes } from 'node:crypto'

const SECRET = randomBytes(32)
export const BENCH_SECRET = `whsec_${SECRET.toString('base64')}`
const BODY_PAD = 'x'.repeat(700)

/** A body of the bench's shape; `tag` makes it unique per event. */
export function benchBody(tag: string): string {
  return JSON.stringify({ type: 'invoice.paid', data: { id: `in_${tag}`, pad: BODY_PAD } })
}

let sequence = 0
export function signedRequest() {
  sequence += 1
  const id = `msg_bench_${process.pid}_${sequence}`
  const timestamp = Math.floor(Date.now() / 1000)
  const body = benchBody(String(sequence))
  const signature = createHmac('sha256', SECRET).update(`${id}.${timestamp}.${body}`).digest('base64')
  return {
    method: 'POST' as const,
    body,
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': `v1,${signature}`,
    },
  }
}
