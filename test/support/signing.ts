import { Webhook } from 'standardwebhooks'

/** The Standard Webhooks spec's published example (also in its Go, Java and C# test suites). */
export const SPEC_VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
} as const

export const TEST_SECRET = 'whsec_dGVzdC1zZWNyZXQtZm9yLWhvb2tsZWRnZXItdGVzdHM='

/**
 * Headers as a Standard Webhooks sender makes them, signed by the reference `standardwebhooks`
 * package (an implementation independent of the verifier under test).
 */
export function signedHeaders(
  body: string,
  options: { id: string; secret?: string; timestamp?: Date },
): Record<string, string> {
  const timestamp = options.timestamp ?? new Date()
  const signature = new Webhook(options.secret ?? TEST_SECRET).sign(options.id, timestamp, body)
  return {
    'content-type': 'application/json',
    'webhook-id': options.id,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': signature,
  }
}
