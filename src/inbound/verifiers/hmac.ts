import { ConfigError } from '../../config/errors.js'
import type { Verification } from '../../config/verifier.js'
import type { VerifyConfigOf } from '../../config/verify.js'
import { parseJsonBody, readEventId, readEventIdAt, stringAt } from './body.js'
import { parseSignatureHeader } from './signature-header.js'
import {
  anyMatch,
  checkTolerance,
  hmac as computeHmac,
  decodeSignature,
  keepHeaders,
  loadSecrets,
  parseUnixSeconds,
} from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * A generic HMAC scheme for senders without a scheme of their own: one header carrying
 * `prefix + encode(HMAC(secret, signedContent))`, where the signed content is a template over the
 * body, an optional timestamp header and an optional id header. Start-up refuses templates that
 * leave the body or the timestamp unsigned, so a config can never verify less than it claims.
 */

type HmacConfig = VerifyConfigOf<'hmac'>
type Part = { kind: 'literal'; text: string } | { kind: 'body' | 'timestamp' | 'id' }

/** Splits the signed-content template, refusing templates that would not authenticate what they use. */
export function parseTemplate(config: HmacConfig): Part[] {
  const parts: Part[] = []
  const pattern = /\{([^{}]*)\}/g
  let last = 0
  for (const match of config.signedContent.matchAll(pattern)) {
    if (match.index > last)
      parts.push({ kind: 'literal', text: config.signedContent.slice(last, match.index) })
    const name = match[1]
    if (name !== 'body' && name !== 'timestamp' && name !== 'id') {
      throw new ConfigError(
        `verify.signedContent: unknown placeholder {${name}} (use {body}, {timestamp}, {id})`,
      )
    }
    parts.push({ kind: name })
    last = match.index + match[0].length
  }
  if (last < config.signedContent.length)
    parts.push({ kind: 'literal', text: config.signedContent.slice(last) })
  const count = (kind: Part['kind']) => parts.filter((part) => part.kind === kind).length
  if (count('body') !== 1) throw new ConfigError('verify.signedContent: must contain {body} exactly once')
  if (config.timestamp !== undefined && count('timestamp') === 0) {
    throw new ConfigError(
      'verify.signedContent: a timestamp header is configured, so it must contain {timestamp}',
    )
  }
  if (config.timestamp === undefined && count('timestamp') > 0) {
    throw new ConfigError('verify.signedContent: uses {timestamp}, but verify.timestamp is not configured')
  }
  if (count('id') > 0 && !('header' in config.eventId)) {
    throw new ConfigError('verify.signedContent: {id} needs verify.eventId to name a header')
  }
  return parts
}

function keyBytes(secret: string, encoding: HmacConfig['secretEncoding'], field: string): Buffer {
  if (encoding === 'utf8') return Buffer.from(secret, 'utf8')
  const decoded = decodeSignature(secret, encoding)
  if (decoded === undefined) throw new ConfigError(`${field}: not valid ${encoding}`)
  return decoded
}

function content(
  parts: Part[],
  values: { raw: Uint8Array; timestamp: string; id: string },
): (string | Uint8Array)[] {
  return parts.map((part) => {
    if (part.kind === 'literal') return part.text
    if (part.kind === 'body') return values.raw
    return part.kind === 'timestamp' ? values.timestamp : values.id
  })
}

export const hmac: Scheme<'hmac'> = {
  name: 'hmac',
  // Unknown for a generic sender; a source may state it (verify.retryHorizonSeconds).
  retryHorizonSeconds: null,
  create(config, { resolveSecret }) {
    const parts = parseTemplate(config)
    const keys = loadSecrets(config.secrets, resolveSecret).map((secret, index) =>
      keyBytes(secret, config.secretEncoding, `verify.secrets[${index}]`),
    )
    const idHeader = 'header' in config.eventId ? config.eventId.header : undefined
    const kept = [
      config.header,
      ...(config.timestamp ? [config.timestamp.header] : []),
      ...(idHeader ? [idHeader] : []),
    ]
    if (config.eventType !== undefined && 'header' in config.eventType) kept.push(config.eventType.header)
    const signatureFormat = {
      name: config.header,
      // Spaces as well as commas: senders differ, and neither can occur inside hex or base64.
      separator: /[\s,]+/,
      signaturePrefix: config.prefix,
      encoding: config.encoding,
      malformedMessage: `${config.header} must hold ${config.prefix}<${config.encoding}> values`,
    }
    return {
      verify(delivery): Verification {
        const header = delivery.headers[config.header]
        if (header === undefined)
          return reject('missing_signature_headers', `expected a ${config.header} header`)
        let timestampText = ''
        if (config.timestamp !== undefined) {
          const value = delivery.headers[config.timestamp.header]
          if (value === undefined) {
            return reject('missing_signature_headers', `expected a ${config.timestamp.header} header`)
          }
          const timestamp = parseUnixSeconds(value)
          if (timestamp === undefined) {
            return reject('malformed_signature_header', `${config.timestamp.header} must be Unix seconds`)
          }
          const outside = checkTolerance(
            timestamp,
            delivery.now,
            config.timestamp.toleranceSeconds,
            config.timestamp.header,
          )
          if (outside !== undefined) return outside
          timestampText = value
        }
        const parsed = parseSignatureHeader(header, signatureFormat)
        if (parsed.kind === 'rejected') return parsed
        // With {id} in the template the id is part of what is signed, so it is needed to verify.
        const headerId =
          idHeader === undefined ? undefined : readEventId(delivery.headers[idHeader], idHeader)
        if (
          headerId !== undefined &&
          typeof headerId !== 'string' &&
          parts.some((part) => part.kind === 'id')
        ) {
          return headerId
        }
        const signed = content(parts, {
          raw: delivery.raw,
          timestamp: timestampText,
          id: typeof headerId === 'string' ? headerId : '',
        })
        const expected = keys.map((key) => computeHmac(config.algorithm, key, ...signed))
        if (!anyMatch(expected, parsed.signatures)) {
          return reject('invalid_signature', 'the signature matches no configured secret')
        }
        const body = parseJsonBody(delivery.raw)
        if (body.kind === 'rejected') return body
        const eventId =
          headerId ??
          readEventIdAt(body.value, 'jsonPointer' in config.eventId ? config.eventId.jsonPointer : '')
        if (typeof eventId !== 'string') return eventId
        return {
          kind: 'verified',
          eventId,
          eventType: readType(config, delivery.headers, body.value) ?? body.type,
          event: body.value,
          keptHeaders: keepHeaders(delivery.headers, kept),
        }
      },
    }
  },
  sign(config, secrets, { raw, timestamp, id }) {
    const parts = parseTemplate(config)
    if (id === undefined && parts.some((part) => part.kind === 'id')) {
      throw new ConfigError('the signed content includes {id}: give the event id to sign')
    }
    const signed = content(parts, { raw, timestamp: String(timestamp), id: id ?? '' })
    const signatures = secrets.map(
      (secret, index) =>
        config.prefix +
        computeHmac(
          config.algorithm,
          keyBytes(secret, config.secretEncoding, `secrets[${index}]`),
          ...signed,
        ).toString(config.encoding),
    )
    const headers: Record<string, string> = { [config.header]: signatures.join(',') }
    if (config.timestamp !== undefined) headers[config.timestamp.header] = String(timestamp)
    if ('header' in config.eventId && id !== undefined) headers[config.eventId.header] = id
    return headers
  },
}

function readType(
  config: HmacConfig,
  headers: Readonly<Record<string, string>>,
  body: unknown,
): string | null {
  if (config.eventType === undefined) return null
  if ('header' in config.eventType) return headers[config.eventType.header] ?? null
  return stringAt(body, config.eventType.jsonPointer)
}
