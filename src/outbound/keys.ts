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
