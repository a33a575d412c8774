// Signed Standard Webhooks deliveries for the bench: unique ids, bodies of a chosen size, signed
// with node:crypto so the generator costs little of the shared CPU.
import { createHmac, randomBytes } from 'node:crypto'

const SECRET = randomBytes(32)
export const BENCH_SECRET = `whsec_${SECRET.toString('base64')}`

/** The intake's and the trickle's bodies: a small provider event (the size the peer was measured with). */
export const SMALL_BODY_BYTES = 300
/** The drain's bodies: a typical provider event, the size the drain's WAL figures were first measured with. */
export const DRAIN_BODY_BYTES = 750

/**
 * A body of the bench's shape, `bytes` long (or a little longer when the tag is long); `tag` makes it
 * unique per event. `sentAt` (performance.now() of the bench process) lets the destination time the
 * event from its sending to its forward: the forward carries the original bytes.
 */
export function benchBody(tag: string, bytes: number, sentAt?: number): string {
  const stamp = sentAt === undefined ? '' : `"sent_at":${sentAt.toFixed(3)},`
  const bare = `{"type":"invoice.paid","data":{"id":"in_${tag}",${stamp}"pad":""}}`
  return `{"type":"invoice.paid","data":{"id":"in_${tag}",${stamp}"pad":"${'x'.repeat(Math.max(0, bytes - bare.length))}"}}`
}

let sequence = 0
export function signedRequest(options: { bytes: number; sentAt?: number }) {
  sequence += 1
  const id = `msg_bench_${process.pid}_${sequence}`
  const timestamp = Math.floor(Date.now() / 1000)
  const body = benchBody(String(sequence), options.bytes, options.sentAt)
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
