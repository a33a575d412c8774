import { withAbortDeadline } from '../deadline.js'
import { DEFAULT_TIMEOUT_MS } from './machine.js'
import type { ExecuteResult, Tool, ToolContext, UndoResult } from './tools.js'

/** Runs one attempt; anything but a returned success or rejection is an unknown outcome. */
export async function callExecute<A, R>(
  tool: Tool<A, R>,
  args: A,
  ctx: Omit<ToolContext, 'signal'>,
): Promise<ExecuteResult<R>> {
  const ms = tool.timeoutMs ?? DEFAULT_TIMEOUT_MS
  try {
    return await withAbortDeadline(ms, `no answer within ${ms} ms`, (signal) =>
      tool.execute(args, { ...ctx, signal }),
    )
  } catch (error) {
    // A throw may come after the request left (a reset, a timeout): never read it as "did not happen".
    return { kind: 'unknown', error: describe(error) }
  }
}

/** Runs a recorded undo; a throw or a timeout is a failed undo (reconciliation follows). */
export async function callUndo<A, R>(
  tool: Tool<A, R>,
  args: A,
  ctx: Omit<ToolContext, 'signal' | 'allowHosts'> & { undoRef: unknown },
): Promise<UndoResult> {
  const undo = tool.undo
  if (undo === undefined) return { kind: 'failure', error: 'the tool has no undo' }
  const ms = tool.timeoutMs ?? DEFAULT_TIMEOUT_MS
  try {
    return await withAbortDeadline(ms, `no answer within ${ms} ms`, (signal) =>
      undo(args, { ...ctx, allowHosts: [], signal }),
    )
  } catch (error) {
    return { kind: 'failure', error: describe(error) }
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : ''
    return `${error.message}${cause}`.slice(0, 2000)
  }
  return String(error).slice(0, 2000)
}
