import { describe, expect, test } from 'vitest'
import {
  MAX_SIGNATURE_ENTRIES,
  parseSignatureHeader,
  type SignatureHeaderFormat,
} from './signature-header.js'

const STRIPE_LIKE = {
  name: 'stripe-signature',
  separator: ',',
  timestampKey: 't',
  signaturePrefix: 'v1=',
  encoding: 'hex',
  malformedMessage: 'stripe-signature must be t=<unix seconds>,v1=<hex>',
} as const satisfies SignatureHeaderFormat

const BASE64_LIST = {
  name: 'x-shopify-hmac-sha256',
  separator: ',',
  signaturePrefix: '',
  encoding: 'base64',
  malformedMessage: 'x-shopify-hmac-sha256 must be base64',
} as const satisfies SignatureHeaderFormat

const SPACED = { ...BASE64_LIST, name: 'x-signature', separator: /[\s,]+/, signaturePrefix: 'sha256=' }

const HEX_A = 'ab'.repeat(32)
const HEX_B = 'cd'.repeat(32)
const B64_A = Buffer.from(HEX_A, 'hex').toString('base64')

const malformed = (message: string) => ({ kind: 'rejected', code: 'malformed_signature_header', message })
const tooManyMessage = (message: string) => ({ kind: 'rejected', code: 'too_many_signatures', message })
const parsed = (timestamp: number | undefined, ...hex: string[]) => ({
  kind: 'parsed',
  timestamp,
  signatures: hex.map((value) => Buffer.from(value, 'hex')),
})
const tooMany = (name: string) =>
  tooManyMessage(`${name} carries more than 16 signatures; at most 16 are accepted`)

const cases: { name: string; format: SignatureHeaderFormat; header: string; expected: unknown }[] = [
  {
    name: 'valid: timestamp and two signatures',
    format: STRIPE_LIKE,
    header: `t=1700000000,v1=${HEX_A},v1=${HEX_B}`,
    expected: parsed(1700000000, HEX_A, HEX_B),
  },
  {
    name: 'valid: unknown and weaker schemes are skipped, never read as signatures',
    format: STRIPE_LIKE,
    header: `t=1700000000,v0=${HEX_B},v1=${HEX_A},x=y,bare`,
    expected: parsed(1700000000, HEX_A),
  },
  {
    name: 'valid: bare base64 values',
    format: BASE64_LIST,
    header: `${B64_A},${B64_A}`,
    expected: parsed(undefined, HEX_A, HEX_A),
  },
  {
    name: 'duplicate t: the tolerance check could read one and the signature cover the other',
    format: STRIPE_LIKE,
    header: `t=1700000000,v1=${HEX_A},t=1700000000`,
    expected: malformed(STRIPE_LIKE.malformedMessage),
  },
  {
    name: 'missing t',
    format: STRIPE_LIKE,
    header: `v1=${HEX_A}`,
    expected: malformed(STRIPE_LIKE.malformedMessage),
  },
  ...['1e9', '12abc', '-1', '1700000000.5', '', '1234567890123'].map((seconds) => ({
    name: `t=${seconds} is not strict Unix seconds`,
    format: STRIPE_LIKE,
    header: `t=${seconds},v1=${HEX_A}`,
    expected: malformed(STRIPE_LIKE.malformedMessage),
  })),
  {
    name: 'bad hex is skipped, not coerced: odd length, a stray letter',
    format: STRIPE_LIKE,
    header: `t=1700000000,v1=${HEX_A}0,v1=${HEX_B.slice(0, -1)}g,v1=${HEX_B}`,
    expected: parsed(1700000000, HEX_B),
  },
  {
    name: 'only bad hex: malformed',
    format: STRIPE_LIKE,
    header: `t=1700000000,v1=zz${HEX_A}`,
    expected: malformed(STRIPE_LIKE.malformedMessage),
  },
  {
    name: 'bad base64 (url-safe alphabet, inner padding, a stray character): malformed',
    format: BASE64_LIST,
    header: `${B64_A.replace(/.$/, '_')},ab=cd,${B64_A}!`,
    expected: malformed(BASE64_LIST.malformedMessage),
  },
  {
    name: 'empty header',
    format: BASE64_LIST,
    header: '',
    expected: malformed(BASE64_LIST.malformedMessage),
  },
  {
    name: 'only separators',
    format: STRIPE_LIKE,
    header: ' , ,, ',
    expected: malformed(STRIPE_LIKE.malformedMessage),
  },
  {
    name: 'exactly 16 signatures are accepted',
    format: STRIPE_LIKE,
    header: ['t=1700000000', ...Array(16).fill(`v1=${HEX_A}`)].join(','),
    expected: parsed(1700000000, ...Array<string>(16).fill(HEX_A)),
  },
  {
    name: 'too many entries: 17 signatures',
    format: STRIPE_LIKE,
    header: ['t=1700000000', ...Array(17).fill(`v1=${HEX_A}`)].join(','),
    expected: tooMany('stripe-signature'),
  },
  {
    name: 'too many entries: undecodable ones count too, they cost the same to read',
    format: BASE64_LIST,
    header: Array(17).fill('!').join(','),
    expected: tooMany('x-shopify-hmac-sha256'),
  },
  {
    name: 'a smaller cap from the caller',
    format: { ...BASE64_LIST, maxEntries: 1 },
    header: `${B64_A},${B64_A}`,
    expected: tooManyMessage('x-shopify-hmac-sha256 carries more than 1 signatures; at most 1 are accepted'),
  },
  {
    name: 'whitespace around entries is ignored',
    format: STRIPE_LIKE,
    header: ` t=1700000000 ,\tv1=${HEX_A} , `,
    expected: parsed(1700000000, HEX_A),
  },
  {
    name: 'whitespace inside an entry is not: `v1 = <hex>` is no signature',
    format: STRIPE_LIKE,
    header: `t=1700000000,v1 = ${HEX_A},v1= ${HEX_B}`,
    expected: malformed(STRIPE_LIKE.malformedMessage),
  },
  {
    name: 'a pattern separator: spaces and commas',
    format: SPACED,
    header: `sha256=${B64_A}  sha1=${B64_A},\tsha256=${B64_A}`,
    expected: parsed(undefined, HEX_A, HEX_A),
  },
]

describe('parseSignatureHeader', () => {
  test.each(cases)('$name', ({ format, header, expected }) => {
    expect(parseSignatureHeader(header, format)).toEqual(expected)
  })

  test('the default cap is the one the seven header schemes use', () => {
    expect(MAX_SIGNATURE_ENTRIES).toBe(16)
  })
})
