import type { EffectClass } from '../db/outbound-schema.js'

export type { EffectClass }

/** What `execute` and `undo` are given, besides the arguments. */
export interface ToolContext {
  /** Pass this on as the idempotency key: it is the same for every retry that must not double. */
  key: string
  /** The operation key (the same as `key` except after a compensated attempt). */
  operationKey: string
  /** 1 for the first attempt; counts attempts of earlier rounds and crashed ones too. */
  attempt: number
  /** Aborted when the attempt runs out of time: whatever was sent may still land (unknown outcome). */
  signal: AbortSignal
  /** Hosts the operator allows although they are not public (the config's `outbound.allowHosts`). */
  allowHosts: readonly string[]
}

export type ExecuteResult<R> =
  /** It happened. */
  | { kind: 'success'; result: R; downstreamId?: string | undefined }
  /** Definitely did not happen (a validation error, a declined card): never retried. */
  | { kind: 'rejection'; error: string; details?: unknown }
  /** Sent, but the answer says nothing certain (a 5xx, a 409 "in progress"): same as a throw. */
  | { kind: 'unknown'; error: string; details?: unknown }

export type UndoResult =
  | { kind: 'success'; details?: unknown }
  | { kind: 'failure'; error: string; details?: unknown }

/** What `reconcile` is asked about: the operation as the ledger recorded it. */
export interface OperationView<A = unknown> {
  id: string
  key: string
  tool: string
  effect: EffectClass
  args: A
  payloadHash: string
  status: string
  attempts: number
  /** The key each attempt sent downstream, oldest first. */
  attemptKeys: readonly string[]
  downstreamId: string | null
  undoRef: unknown
  lastError: string | null
}

export type ReconcileResult<R = unknown> =
  /** The external system shows the effect: the ledger records success with this evidence. */
  | { kind: 'found'; evidence: unknown; result?: R; downstreamId?: string | undefined }
  /** The external system shows no such effect. */
  | { kind: 'not_found'; evidence?: unknown }
  /** The question cannot be answered now (the system is down, or has no lookup). */
  | { kind: 'cannot_tell'; evidence?: unknown }

export interface ToolDefinition<A, R> {
  name: string
  effect: EffectClass
  /** Receives the key to pass on; a throw, a timeout or a reset after sending is an unknown outcome. */
  execute: (args: A, ctx: ToolContext) => Promise<ExecuteResult<R>>
  /** Required for compensable tools; called with the key of the attempt it undoes. Must tolerate undoing nothing. */
  undo?: (args: A, ctx: ToolContext & { undoRef: unknown }) => Promise<UndoResult>
  /** Asks the external system whether the operation happened. */
  reconcile?: (op: OperationView<A>) => Promise<ReconcileResult<R>>
  /** One attempt's time limit (default 30 s); the lease must outlast it. */
  timeoutMs?: number
  /** Overrides the ledger's bounded backoff for this tool. */
  retry?: Partial<RetryPolicy>
}

export interface RetryPolicy {
  /** Attempts per round, the first included (default 4). */
  attempts: number
  /** Delay before the second attempt; it doubles after every attempt (default 500 ms). */
  baseDelayMs: number
  /** The longest delay between two attempts (default 10 s). */
  maxDelayMs: number
}

export type Tool<A = unknown, R = unknown> = Readonly<ToolDefinition<A, R>> & { readonly __tool: true }

const TOOL_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/

/** Declares a tool and its effect class, which decides its retry policy (see docs/outbound.md). */
export function defineTool<A, R>(definition: ToolDefinition<A, R>): Tool<A, R> {
  if (!TOOL_NAME.test(definition.name)) throw new TypeError(`tool name '${definition.name}' is not valid`)
  if (definition.effect === 'compensable' && definition.undo === undefined) {
    // The undo must exist before the first call goes out; it cannot be made up after a lost response.
    throw new TypeError(`tool '${definition.name}' is compensable and needs an undo`)
  }
  return Object.freeze({ ...definition, __tool: true as const })
}
