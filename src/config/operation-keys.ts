/**
 * The words every room uses about operation keys: how long one may be, and which keys and tools
 * belong to whom. How a key is made from a workflow is the outbound ledger's (src/outbound/keys.ts).
 */

/** The longest operation key; stepKey makes every key it builds fit. */
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

/**
 * Tools the service runs for itself: forwards (a source's handler and every route) and alerts.
 * Their operations are internal: no evidence rule may name or settle them.
 */
export const isInternalTool = (tool: string): boolean => tool === 'forward' || tool.startsWith('alert.')
