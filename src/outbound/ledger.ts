import { defaultOutboundSettings, type OutboundSettings } from '../config/outbound.js'
import type { Database } from '../db/client.js'
import { type Failpoints, noFailpoints } from '../failpoints.js'
import type { Logger } from '../logger.js'
import { type CompensateOutcome, compensate } from './compensate.js'
import type { EventInvoker } from './event-handler.js'
import { type InvokeRequest, invoke } from './invoke.js'
import { stepKey } from './keys.js'
import { type Machine, noReconcileScheduler, type ReconcileScheduler } from './machine.js'
import type { InvokeOutcome } from './outcomes.js'
import type { Tool } from './tools.js'
import { type WaitOptions, type WaitResult, waitForOperation } from './wait.js'

export type { CompensateOutcome, InvokeRequest, ReconcileScheduler, WaitOptions, WaitResult }

export interface OutboundLedgerOptions {
  db: Database
  logger: Logger
  settings?: OutboundSettings
  scheduler?: ReconcileScheduler
  failpoints?: Failpoints
  /** Tools reconciliation and compensation can find by name after a restart. */
  tools?: readonly Tool<never, unknown>[]
}

export interface OutboundLedger {
  invoke<A, R>(tool: Tool<A, R>, request: InvokeRequest<A>): Promise<InvokeOutcome<R>>
  /** Runs the recorded undo of a completed compensable operation (a saga abort). */
  compensate<A, R>(tool: Tool<A, R>, key: string): Promise<CompensateOutcome>
  /**
   * Waits until the operation's status is no longer `from` (default: its status now), at most
   * `timeoutMs` (up to MAX_WAIT_MS): an agent waits for the confirming event instead of polling.
   */
  waitFor(key: string, options: WaitOptions): Promise<WaitResult>
  register(tool: Tool<never, unknown>): void
  tool(name: string): Tool<never, unknown> | undefined
  readonly settings: OutboundSettings
  readonly db: Database
}

// The state machine behind each ledger, for the agents' protocol and the reconciler: kept out of
// the public type so its internal steps never become API by accident.
const machines = new WeakMap<OutboundLedger, Machine>()

export function machineOf(ledger: OutboundLedger): Machine {
  const machine = machines.get(ledger)
  if (machine === undefined) throw new TypeError('not a ledger made by createOutboundLedger')
  return machine
}

/** The outbound ledger: `invoke` enforces the decision table for a tool's effect class. */
export function createOutboundLedger(options: OutboundLedgerOptions): OutboundLedger {
  const registry = new Map<string, Tool<never, unknown>>()
  const register = (tool: Tool<never, unknown>) => {
    const known = registry.get(tool.name)
    if (known !== undefined && known !== tool && known.effect !== tool.effect) {
      throw new TypeError(`tool '${tool.name}' is already registered with effect ${known.effect}`)
    }
    registry.set(tool.name, tool)
  }
  for (const tool of options.tools ?? []) register(tool)
  const machine: Machine = {
    db: options.db,
    settings: options.settings ?? defaultOutboundSettings,
    scheduler: options.scheduler ?? noReconcileScheduler,
    logger: options.logger,
    failpoints: options.failpoints ?? noFailpoints,
    tool: (name) => registry.get(name),
  }
  const ledger: OutboundLedger = {
    settings: machine.settings,
    db: machine.db,
    register,
    tool: machine.tool,
    invoke(tool, request) {
      register(tool as unknown as Tool<never, unknown>)
      return invoke(machine, tool, request)
    },
    compensate: (tool, key) => compensate(machine, tool, key),
    waitFor: (key, waitOptions) => waitForOperation(machine.db, key, waitOptions),
  }
  machines.set(ledger, machine)
  return ledger
}

/** `ctx.invoke` of an event's handler: the key is the event's identity plus the step, never a run's id. */
export function eventInvoker(ledger: OutboundLedger): EventInvoker {
  return (event) => (tool, step, args) =>
    ledger.invoke(tool, {
      key: stepKey([event.source, event.eventId, ...(event.scope ?? [])], step),
      args,
      runId: event.runId,
      ...(event.traceId === undefined ? {} : { traceId: event.traceId }),
    })
}
