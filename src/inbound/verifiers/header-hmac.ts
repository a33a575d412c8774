import type { Verification } from '../../config/verifier.js'
import type { SchemeName, VerifyConfigOf } from '../../config/verify.js'
import { parseJsonBody, readEventId, readEventIdAt } from './body.js'
import { parseSignatureHeader, type SignatureHeaderFormat } from './signature-header.js'
import { anyMatch, checkTolerance, hmac, keepHeaders, loadSecrets } from './signatures.js'
import { reject, type Scheme } from './types.js'

/**
 * A provider whose scheme is one header of HMAC-SHA256 signatures (hex or base64, keyed with the
 * secret's UTF-8 bytes) over the body and whatever the provider puts before it. Stripe, Paddle,
 * Square, Shopify and GitHub differ only in this data (see presets.ts), so one verifier and one
 * signer serve them all.
 */
export interface HeaderHmacPreset<Name extends SchemeName> {
  name: Name
  retryHorizonSeconds: number | null
  /**
   * The signature header. With a `timestampKey` the header carries the signed timestamp, checked
   * against the config's `toleranceSeconds`.
   */
  header: SignatureHeaderFormat & { separator: string }
  /** What the provider signs before the body, given the header's timestamp (if it has one). */
  signedBefore: (config: VerifyConfigOf<Name>, timestamp: number | undefined) => string
  /** Refuses a secret that cannot be this provider's, at start-up (a ConfigError). */
  checkSecret?: (secret: string, index: number) => void
  /**
   * Where the event id is: a pointer into the signed body, or headers the signature does not
   * cover, the first present one read (`sendAs`: the one `sign` sets).
   */
  eventId: { pointer: string } | { headers: readonly [string, ...string[]]; sendAs: string }
  eventType: (headers: Readonly<Record<string, string>>, body: unknown) => string | null
  /** The headers kept on the row besides the signature. */
  kept?: readonly string[]
  /** The `invalid_signature` message; by default "the signature matches no configured secret". */
  mismatch?: string
  /** Said with `missing_signature_headers` (GitHub's SHA-1 header is not accepted in its place). */
  missingNote?: string
}

type PresetSettings = { secrets: string[]; toleranceSeconds?: number }

/** The schemes whose config is secrets and, where they sign a timestamp, its tolerance. */
type HeaderHmacName = 'stripe' | 'paddle' | 'square' | 'shopify' | 'github'

/** The scheme a preset describes: its verifier and its signer. */
export function headerHmacScheme<Name extends HeaderHmacName>(preset: HeaderHmacPreset<Name>): Scheme<Name> {
  const format = preset.header
  const name = format.name
  // "an x-shopify-… header", "a stripe-signature header".
  const missing = `expected ${name.startsWith('x-') ? 'an' : 'a'} ${name} header${
    preset.missingNote === undefined ? '' : ` (${preset.missingNote})`
  }`
  const mismatch = preset.mismatch ?? 'the signature matches no configured secret'
  const kept = [name, ...(preset.kept ?? [])]
  const idHeaders = 'headers' in preset.eventId ? preset.eventId.headers : undefined
  return {
    name: preset.name,
    retryHorizonSeconds: preset.retryHorizonSeconds,
    create(config, { resolveSecret }) {
      // Every preset's config has its secrets and, if it signs a timestamp, a tolerance
      // (src/config/verify.ts); TypeScript cannot see that through the generic name.
      const settings: PresetSettings = config as VerifyConfigOf<Name> & PresetSettings
      const secrets = loadSecrets(settings.secrets, resolveSecret).map((secret, index) => {
        preset.checkSecret?.(secret, index)
        return Buffer.from(secret, 'utf8')
      })
      const tolerance = settings.toleranceSeconds
      if (format.timestampKey !== undefined && tolerance === undefined) {
        throw new TypeError(`${preset.name}: a signed timestamp needs toleranceSeconds in the config schema`)
      }
      return {
        verify(delivery): Verification {
          const header = delivery.headers[name]
          if (header === undefined) return reject('missing_signature_headers', missing)
          const parsed = parseSignatureHeader(header, format)
          if (parsed.kind === 'rejected') return parsed
          if (parsed.timestamp !== undefined && tolerance !== undefined) {
            const label = `${name} ${format.timestampKey}`
            const outside = checkTolerance(parsed.timestamp, delivery.now, tolerance, label)
            if (outside !== undefined) return outside
          }
          const before = preset.signedBefore(config, parsed.timestamp)
          const expected = secrets.map((key) => hmac('sha256', key, before, delivery.raw))
          if (!anyMatch(expected, parsed.signatures)) return reject('invalid_signature', mismatch)
          const headerId = idHeaders === undefined ? undefined : idFromHeaders(delivery.headers, idHeaders)
          if (headerId !== undefined && typeof headerId !== 'string') return headerId
          const body = parseJsonBody(delivery.raw)
          if (body.kind === 'rejected') return body
          const eventId =
            headerId ?? readEventIdAt(body.value, 'pointer' in preset.eventId ? preset.eventId.pointer : '')
          if (typeof eventId !== 'string') return eventId
          return {
            kind: 'verified',
            eventId,
            eventType: preset.eventType(delivery.headers, body.value),
            event: body.value,
            keptHeaders: keepHeaders(delivery.headers, kept),
          }
        },
      }
    },
    sign(config, secrets, { raw, timestamp, id }) {
      const signed = format.timestampKey === undefined ? undefined : timestamp
      const before = preset.signedBefore(config, signed)
      const signatures = secrets.map(
        (secret) =>
          format.signaturePrefix + hmac('sha256', Buffer.from(secret), before, raw).toString(format.encoding),
      )
      const entries = signed === undefined ? signatures : [`${format.timestampKey}=${signed}`, ...signatures]
      const headers: Record<string, string> = { [name]: entries.join(format.separator) }
      if ('sendAs' in preset.eventId && id !== undefined) headers[preset.eventId.sendAs] = id
      return headers
    },
  }
}

/** The first of `names` present; where none is, the message names them all. */
function idFromHeaders(headers: Readonly<Record<string, string>>, names: readonly [string, ...string[]]) {
  const [first] = names
  if (headers[first] !== undefined) return readEventId(headers[first], first)
  const present = names.find((name) => headers[name] !== undefined)
  return readEventId(present === undefined ? undefined : headers[present], names.join(' or '))
}
