import type { Verification } from '../../config/verifier.js'
import { parseJsonBody, readEventId, readEventIdAt, stringAt } from './body.js'
import { parseSignatureHeader, type SignatureHeaderFormat } from './signature-header.js'
import { anyMatch, checkTolerance, hmac, keepHeaders, loadSecrets, parseUnixSeconds } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:{timestamp}:{body}")>` with
 * `X-Slack-Request-Timestamp`. Events API bodies are JSON; interactivity and slash commands are
 * form-encoded, and are verified and stored as the exact bytes received (never re-encoded).
 */

const SIGNATURE = 'x-slack-signature'
const TIMESTAMP = 'x-slack-request-timestamp'
const KEPT = [SIGNATURE, TIMESTAMP, 'x-slack-retry-num', 'x-slack-retry-reason']

const FORMAT = {
  name: SIGNATURE,
  separator: ',',
  signaturePrefix: 'v0=',
  encoding: 'hex',
} as const satisfies SignatureHeaderFormat

const decoder = new TextDecoder('utf-8', { fatal: true })

export const slack: Scheme<'slack'> = {
  name: 'slack',
  // Three retries: at once, after about a minute, after about five minutes.
  retryHorizonSeconds: 6 * 60,
  create(config, { resolveSecret }) {
    const secrets = loadSecrets(config.secrets, resolveSecret).map((secret) => Buffer.from(secret, 'utf8'))
    return {
      verify(delivery) {
        const header = delivery.headers[SIGNATURE]
        const timestampText = delivery.headers[TIMESTAMP]
        if (header === undefined || timestampText === undefined) {
          return reject('missing_signature_headers', `expected ${SIGNATURE} and ${TIMESTAMP} headers`)
        }
        const timestamp = parseUnixSeconds(timestampText)
        if (timestamp === undefined)
          return reject('malformed_signature_header', `${TIMESTAMP} must be Unix seconds`)
        const parsed = parseSignatureHeader(header, FORMAT)
        if (parsed.kind === 'rejected') return parsed
        const outside = checkTolerance(timestamp, delivery.now, config.toleranceSeconds, TIMESTAMP)
        if (outside !== undefined) return outside
        const expected = secrets.map((key) => hmac('sha256', key, `v0:${timestamp}:`, delivery.raw))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'the signature matches no configured secret')
        }
        const keptHeaders = keepHeaders(delivery.headers, KEPT)
        const contentType = delivery.headers['content-type'] ?? ''
        if (contentType.toLowerCase().startsWith('application/x-www-form-urlencoded')) {
          return verifiedForm(delivery.raw, keptHeaders)
        }
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        // The handshake Slack sends when the request URL is saved; answered only once it verified,
        // so nobody can use this endpoint to confirm a URL they do not own.
        if (body.type === 'url_verification') {
          const challenge = stringAt(body.value, '/challenge')
          if (challenge === null) return reject('invalid_body', 'url_verification without a challenge')
          return { kind: 'handshake', body: { challenge } }
        }
        const eventId = readEventIdAt(body.value, '/event_id')
        if (typeof eventId !== 'string') return eventId
        return {
          kind: 'verified',
          eventId,
          eventType: stringAt(body.value, '/event/type') ?? body.type,
          event: body.value,
          keptHeaders,
        }
      },
    }
  },
  sign(_config, secrets, { raw, timestamp }) {
    const signatures = secrets.map(
      (secret) => `v0=${hmac('sha256', Buffer.from(secret), `v0:${timestamp}:`, raw).toString('hex')}`,
    )
    return { [SIGNATURE]: signatures.join(','), [TIMESTAMP]: String(timestamp) }
  },
}

/**
 * Interactivity (`payload=<json>`) and slash commands (`command=…&trigger_id=…`). Their dedup key is
 * `trigger_id`, which Slack makes per user action.
 */
function verifiedForm(raw: Uint8Array, keptHeaders: Record<string, string>): Verification {
  let params: URLSearchParams
  try {
    params = new URLSearchParams(decoder.decode(raw))
  } catch {
    return reject('invalid_body', 'the form body is not valid UTF-8')
  }
  const fields: Record<string, unknown> = Object.fromEntries(params)
  const payloadText = params.get('payload')
  if (payloadText !== null) {
    let payload: unknown
    try {
      payload = JSON.parse(payloadText)
    } catch {
      return reject('invalid_body', 'the form field payload is not JSON')
    }
    const eventId = readEventIdAt(payload, '/trigger_id')
    if (typeof eventId !== 'string') return eventId
    return {
      kind: 'verified',
      eventId,
      eventType: stringAt(payload, '/type'),
      event: { ...fields, payload },
      keptHeaders,
    }
  }
  const eventId = readEventId(params.get('trigger_id') ?? undefined, 'the form field trigger_id')
  if (typeof eventId !== 'string') return eventId
  return {
    kind: 'verified',
    eventId,
    eventType: params.has('command') ? 'slash_command' : null,
    event: fields,
    keptHeaders,
  }
}
