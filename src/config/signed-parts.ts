import { assertNever } from '../assert.js'
import type { DedupKey } from './dedup-key.js'
import type { VerifyConfig } from './verify.js'

/**
 * What each scheme's signature covers, read off its verify config: the facts the config checks
 * need (which dedup key parts a resend could change, whether a source dedups on the body by default).
 * The verifiers in src/inbound/verifiers are what make these true.
 */

/**
 * What a scheme's signature covers, besides the body (every scheme signs the body, so a JSON pointer
 * into it is always signed). A header outside this list can be changed by anyone who holds one
 * captured delivery, and the signature still verifies.
 */
export function signedHeaders(config: VerifyConfig): { headers: readonly string[]; what: string } {
  switch (config.scheme) {
    case 'standard-webhooks':
      // Only the webhook-* set: when webhook-id is present it is the one verified, so a captured
      // svix-* delivery resent under webhook-* names leaves any svix-id header unsigned.
      return {
        headers: ['webhook-id', 'webhook-timestamp'],
        what: 'the webhook-id and webhook-timestamp headers and the body',
      }
    case 'stripe':
      return { headers: [], what: 'the timestamp inside stripe-signature and the body' }
    case 'github':
    case 'shopify':
      return { headers: [], what: 'the body only' }
    case 'slack':
      return {
        headers: ['x-slack-request-timestamp'],
        what: 'the x-slack-request-timestamp header and the body',
      }
    case 'paddle':
      return { headers: [], what: 'the timestamp inside paddle-signature and the body' }
    case 'square':
      return { headers: [], what: 'the notification URL and the body' }
    case 'hmac': {
      const idSigned = 'header' in config.eventId && config.signedContent.includes('{id}')
      const headers = [
        ...(config.timestamp === undefined ? [] : [config.timestamp.header]),
        ...('header' in config.eventId && idSigned ? [config.eventId.header] : []),
      ]
      return {
        headers,
        what: `verify.signedContent '${config.signedContent}'${headers.length === 0 ? '' : ` (${headers.join(', ')})`}`,
      }
    }
    default:
      return assertNever(config)
  }
}

/** The header a scheme reads the event type from, if any (the others read it from the body). */
function eventTypeHeader(config: VerifyConfig): string | undefined {
  if (config.scheme === 'github') return 'x-github-event'
  if (config.scheme === 'shopify') return 'x-shopify-topic'
  if (config.scheme === 'hmac' && config.eventType !== undefined && 'header' in config.eventType) {
    return config.eventType.header
  }
  return undefined
}

/**
 * Every dedup key part this source's signature does not cover, as a start-up problem. Such a part
 * lets one captured delivery be processed again and again under fresh values (a replay the ledger
 * would forward each time), so it is refused unless the source also dedups on the body, which
 * catches the resend, or the operator names the part trusted (a proxy of theirs sets it).
 */
export function unsignedDedupParts(
  verify: VerifyConfig,
  dedupKey: DedupKey | undefined,
  dedupOnBody: boolean,
): string[] {
  if (dedupKey === undefined || dedupOnBody) return []
  const signed = signedHeaders(verify)
  const typeHeader = eventTypeHeader(verify)
  const scope =
    dedupKey.scope === 'event_type' && typeHeader !== undefined && !signed.headers.includes(typeHeader)
      ? [
          `dedupKey.scope "event_type" reads the event type from the ${typeHeader} header, which is not signed: the ${verify.scheme} scheme signs ${signed.what}, so anyone holding one delivery can resend it under another type and have it processed again. Set "dedupOnBody": true so a resent body is a duplicate, or drop the scope`,
        ]
      : []
  return [
    ...scope,
    ...(dedupKey.parts ?? []).flatMap((part, index) => {
      if (!('header' in part) || part.trusted === true || signed.headers.includes(part.header)) return []
      return [
        `dedupKey.parts[${index}] (header ${part.header}) is not signed: the ${verify.scheme} scheme signs ${signed.what}, so anyone holding one delivery can resend it with another ${part.header} and have it processed again. Take the value from the body (a JSON pointer), set "dedupOnBody": true so a resent body is a duplicate, or, if a proxy of yours sets this header, mark the part {"header": "${part.header}", "trusted": true}`,
      ]
    }),
  ]
}

/**
 * Whether the signature covers the event id. Where it does not (GitHub's X-GitHub-Delivery, Shopify's
 * X-Shopify-Event-Id, an `hmac` id header left out of signedContent), anyone holding one captured
 * delivery can resend it under a fresh id, so such sources also dedup on the body by default.
 */
export function eventIdIsSigned(config: VerifyConfig): boolean {
  switch (config.scheme) {
    case 'github':
    case 'shopify':
      return false
    case 'hmac':
      return 'jsonPointer' in config.eventId || config.signedContent.includes('{id}')
    default:
      // Standard Webhooks signs `{id}.{timestamp}.{body}`; the others read the id from the signed body.
      return true
  }
}
