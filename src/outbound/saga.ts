import { stepKey } from './keys.js'
import type { CompensateOutcome, OutboundLedger } from './ledger.js'
import type { InvokeOutcome } from './outcomes.js'
import type { Tool } from './tools.js'

export interface SagaStep<A = unknown, R = unknown> {
  name: string
  tool: Tool<A, R>
  /** Fixed arguments, or made from the results of the steps before (which are stored, so stable). */
  args: A | ((results: Readonly<Record<string, unknown>>) => A)
}

export type SagaRun =
  | { kind: 'completed'; results: Record<string, unknown> }
  /** Stopped at `step`; running the saga again resumes there (completed steps are not run again). */
  | {
      kind: 'stopped'
      step: string
      outcome: Exclude<InvokeOutcome, { kind: 'completed' }>
      results: Record<string, unknown>
    }

export type SagaAbort =
  | { kind: 'aborted'; compensated: string[]; notCompensable: string[] }
  /** A compensation failed or is in progress: the abort stops there and a human decides. */
  | { kind: 'stopped'; step: string; outcome: CompensateOutcome; compensated: string[] }

/**
 * A multi-step workflow in which every step is its own operation, keyed from the workflow's identity
 * and the step name: a restart resumes at the failed step instead of replaying the sequence, and an
 * abort undoes the completed compensable steps in reverse order.
 */
export function saga(
  ledger: OutboundLedger,
  workflow: readonly string[],
  steps: readonly SagaStep<never, unknown>[],
) {
  const keyOf = (step: SagaStep<never, unknown>) => stepKey(workflow, step.name)
  return {
    async run(): Promise<SagaRun> {
      const results: Record<string, unknown> = {}
      for (const step of steps) {
        const args =
          typeof step.args === 'function' ? (step.args as (r: typeof results) => never)(results) : step.args
        const outcome = await ledger.invoke(step.tool, { key: keyOf(step), args })
        if (outcome.kind !== 'completed') return { kind: 'stopped', step: step.name, outcome, results }
        results[step.name] = outcome.result
      }
      return { kind: 'completed', results }
    },

    async abort(): Promise<SagaAbort> {
      const compensated: string[] = []
      const notCompensable: string[] = []
      for (const step of [...steps].reverse()) {
        if (step.tool.effect !== 'compensable') {
          notCompensable.push(step.name)
          continue
        }
        const outcome = await ledger.compensate(step.tool, keyOf(step))
        switch (outcome.kind) {
          case 'compensated':
            compensated.push(step.name)
            break
          case 'not_completed':
          case 'not_compensable':
            break
          case 'retry_later':
          case 'escalated':
            // Never skip ahead: unwinding around a step that is still in place leaves a worse state.
            return { kind: 'stopped', step: step.name, outcome, compensated }
        }
      }
      return { kind: 'aborted', compensated, notCompensable }
    },
  }
}
