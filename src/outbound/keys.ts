import { createHash } from 'node:crypto'
import { AGENT_SPACE, MAX_KEY_LENGTH } from '../config/operation-keys.js'

/**
 * Operation keys are made here, by the runtime, never by a model: a model that retries a tool call
 * makes a new tool-call id every time, so only the workflow's identity plus the step's name stays the
 * same across redeliveries, restarts and retries of one intended action.
 */

const STEP_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/

/**
 * In a key that would be longer than MAX_KEY_LENGTH, each encoded workflow part longer than this is
 * replaced by its digest. A source id (at most 63 characters) stays readable.
 */
const LONG_PART = 64

/**
 * `stepKey(['acme', 'evt_1'], 'forward')` → `acme:evt_1:forward`. Parts are joined with ':'; a ':' or
 * '%' inside a part is percent-encoded so two different identities never produce one key.
 *
 * A key that would exceed MAX_KEY_LENGTH (a 255-character event id, a long dedup key) is made to fit,
 * so every id a provider may send can be processed: each part longer than 64 characters becomes
 * `%h<base64url sha256 of the encoded part>` (`acme:%hq1w…:forward`), and should that still be too
 * long, every part after the first becomes one such digest (the source stays the key's prefix). `%h` never comes out of the encoding (a '%' is
 * always followed by 25 or 3A there), so a digest cannot equal a readable part. Keys that fit are
 * left exactly as they always were: operations in flight keep their keys.
 */
export function stepKey(workflow: readonly string[], step: string): string {
  if (workflow.length === 0) throw new TypeError('stepKey needs at least one workflow identity part')
  if (!STEP_NAME.test(step)) {
    throw new TypeError(
      `step name '${step}' must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit`,
    )
  }
  const parts = workflow.map(encodePart)
  const full = `${parts.join(':')}:${step}`
  if (full.length <= MAX_KEY_LENGTH) return full
  const shortened = `${parts.map(shortPart).join(':')}:${step}`
  if (shortened.length <= MAX_KEY_LENGTH) return shortened
  // Many parts near the limit: the first (the source) as above and one digest of all the others, at
  // most 64 + 1 + 45 + 1 + 128 characters. Never equal to a shortened key: that one's digests are of
  // single encoded parts, which hold no ':', and this one's of two parts or more, joined by ':'.
  const [first = '', ...rest] = parts
  return `${shortPart(first)}:${digest(rest.join(':'))}:${step}`
}

/**
 * The prefixes the step keys of one workflow start with: `workflowKeyPrefixes(['acme', 'evt_1'])` →
 * `['acme:evt_1:']`. A workflow with a part too long for some of its keys has a second prefix, the
 * one of its shortened keys (see stepKey). The encoding makes each exact: no other workflow's keys
 * start with it. Keys whose later parts were digested together (many long parts) start with neither.
 */
export function workflowKeyPrefixes(workflow: readonly string[]): string[] {
  if (workflow.length === 0)
    throw new TypeError('workflowKeyPrefixes needs at least one workflow identity part')
  const parts = workflow.map(encodePart)
  const plain = `${parts.join(':')}:`
  const shortened = `${parts.map(shortPart).join(':')}:`
  return shortened === plain ? [plain] : [plain, shortened]
}

function encodePart(part: string): string {
  if (part.length === 0) throw new TypeError('workflow identity parts must not be empty')
  return part.replaceAll('%', '%25').replaceAll(':', '%3A')
}

function shortPart(encoded: string): string {
  return encoded.length > LONG_PART ? digest(encoded) : encoded
}

function digest(text: string): string {
  return `%h${createHash('sha256').update(text, 'utf8').digest('base64url')}`
}

/** The ledger's key of the operation an agent calls `key`. */
export const agentLedgerKey = (key: string): string => `${AGENT_SPACE}${key}`

/** The key an agent knows a ledger key by; undefined for a key outside the agents' space. */
export const agentKeyOf = (ledgerKey: string): string | undefined =>
  ledgerKey.startsWith(AGENT_SPACE) ? ledgerKey.slice(AGENT_SPACE.length) : undefined
