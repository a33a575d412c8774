import { DrizzleQueryError } from 'drizzle-orm'
import { pino } from 'pino'

export type Logger = pino.Logger

/** Credentials and every provider's signature header: enough to replay or forge a delivery. */
const SENSITIVE_HEADERS = [
  'authorization',
  'cookie',
  'set-cookie',
  'webhook-signature',
  'svix-signature',
  'stripe-signature',
  'x-hub-signature-256',
  'x-hub-signature',
  'x-shopify-hmac-sha256',
  'x-slack-signature',
  'paddle-signature',
  'x-square-hmacsha256-signature',
]

/**
 * JSON logs. Signature headers, secrets and tokens are redacted wherever they appear in a logged
 * object, and payloads are never logged, so nothing a log shipper sees can forge or replay an event.
 */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'hookledger' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'secret',
          'secrets',
          'password',
          'token',
          '*.secret',
          '*.secrets',
          '*.password',
          '*.token',
          ...SENSITIVE_HEADERS.flatMap((name) => [`headers["${name}"]`, `*.headers["${name}"]`]),
        ],
        censor: '[redacted]',
      },
      serializers: { err: (error: Error) => pino.stdSerializers.err(withoutParameters(error)) },
    },
    destination,
  )
}

/**
 * A failed statement as its SQL text and its cause, without its parameters: they are data (a search
 * term, a payload field, a key an agent chose), and drizzle writes them into the error's message.
 */
function withoutParameters(error: Error): Error {
  if (!(error instanceof DrizzleQueryError)) return error
  const copy = new DrizzleQueryError(error.query, [], error.cause)
  copy.message = `Failed query: ${error.query}`
  copy.stack = error.stack?.replace(error.message, () => copy.message)
  return copy
}
