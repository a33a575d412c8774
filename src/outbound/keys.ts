/**
 * Operation keys are made here, by the runtime, never by a model: a model that retries a tool call
 * makes a new tool-call id every time, so only the workflow's identity plus the step's name stays the
 * same across redeliveries, restarts and retries of one intended action.
 */

const STEP_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/

/**
 * `stepKey(['acme', 'evt_1'], 'forward')` → `acme:evt_1:forward`. Parts are joined with ':'; a ':' or
 * '%' inside a part is percent-encoded so two different identities never produce one key.
 */
export function stepKey(workflow: readonly string[], step: string): string {
  if (workflow.length === 0) throw new TypeError('stepKey needs at least one workflow identity part')
  if (!STEP_NAME.test(step)) {
    throw new TypeError(
      `step name '${step}' must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit`,
    )
  }
  return [...workflow.map(encodePart), step].join(':')
}

/**
 * The prefix every step key of one workflow shares: `workflowKeyPrefix(['acme', 'evt_1'])` →
 * `acme:evt_1:`. The encoding makes it exact: no other workflow's keys start with it.
 */
export function workflowKeyPrefix(workflow: readonly string[]): string {
  if (workflow.length === 0)
    throw new TypeError('workflowKeyPrefix needs at least one workflow identity part')
  return `${workflow.map(encodePart).join(':')}:`
}

function encodePart(part: string): string {
  if (part.length === 0) throw new TypeError('workflow identity parts must not be empty')
  return part.replaceAll('%', '%25').replaceAll(':', '%3A')
}

export const MAX_KEY_LENGTH = 255

/**
 * The agents' space: every key an agent names through `/v1/operations` is kept as `agents/<key>`.
 * Nothing else may claim a key with this prefix (service keys start with a source or channel id,
 * which cannot contain '/', and `invoke` refuses it), so an agent can never claim, read or settle an
 * operation the service or in-process code made, and a key an agent chose can never pre-empt one of
 * theirs.
 */
export const AGENT_SPACE = 'agents/'

/** The longest key an agent may name: its ledger key (with `agents/`) must fit MAX_KEY_LENGTH. */
export const MAX_AGENT_KEY_LENGTH = MAX_KEY_LENGTH - AGENT_SPACE.length

/** The ledger's key of the operation an agent calls `key`. */
export const agentLedgerKey = (key: string): string => `${AGENT_SPACE}${key}`

/** The key an agent knows a ledger key by; undefined for a key outside the agents' space. */
export const agentKeyOf = (ledgerKey: string): string | undefined =>
  ledgerKey.startsWith(AGENT_SPACE) ? ledgerKey.slice(AGENT_SPACE.length) : undefined

/**
 * Tools the service runs for itself: forwards (a source's handler and every route) and alerts.
 * Their operations are internal: no evidence rule may name or settle them.
 */
export const isInternalTool = (tool: string): boolean => tool === 'forward' || tool.startsWith('alert.')
