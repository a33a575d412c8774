import { type Span, SpanKind } from '@opentelemetry/api'
import type { Context } from 'hono'
import { Hono } from 'hono'
import { z } from 'zod'
import { assertNever } from '../../assert.js'
import type { AgentToken } from '../../config/agents.js'
import { MAX_AGENT_KEY_LENGTH } from '../../config/operation-keys.js'
import type { Database } from '../../db/client.js'
import { findOperation, listAttempts } from '../../db/operation-queries.js'
import type { OperationRow, OperationStatus } from '../../db/operation-rows.js'
import { operationStatus } from '../../db/outbound-schema.js'
import { unstorableText } from '../../db/text.js'
import type { Backpressure } from '../../inbound/backpressure.js'
import type { AgentCaller, AgentClaim, AgentProtocol, AgentReport } from '../../outbound/agent.js'
import { agentKeyOf, agentLedgerKey } from '../../outbound/keys.js'
import { MAX_WAIT_MS, waitForOperation } from '../../outbound/wait.js'
import { contextUnder, TRACING_OFF, type Tracing } from '../../tracing.js'
import { ApiError, busy } from '../errors.js'
import { type AgentVariables, agentAuth } from '../middleware/agent-auth.js'
import { limitBody } from '../middleware/body-limit.js'
import { parseJsonBody } from '../validate.js'

type AgentContext = Context<{ Variables: AgentVariables }>

const key = z.string().min(1).max(MAX_AGENT_KEY_LENGTH)
const observability = z.string().min(1).max(200).optional()

const claimBody = z.object({
  key,
  tool: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, 'must be a tool name'),
  effect: z.enum(['idempotent', 'compensable', 'irreversible']),
  args: z.json(),
  runId: observability,
  traceId: observability,
  toolCallId: observability,
})
const leased = { leaseToken: z.uuid(), attempt: z.number().int().min(1) }
const undoRefBody = z.object({ ...leased, undoRef: z.json().refine((v) => v !== null, 'must not be null') })
const outcomeBody = z.discriminatedUnion('outcome', [
  z.object({
    ...leased,
    outcome: z.literal('success'),
    result: z.json().optional(),
    downstreamId: z.string().max(500).optional(),
  }),
  z.object({ ...leased, outcome: z.literal('rejection'), error: z.string().min(1).max(2000) }),
  z.object({ ...leased, outcome: z.literal('unknown'), error: z.string().min(1).max(2000) }),
])
const undoOutcomeBody = z.discriminatedUnion('outcome', [
  z.object({ ...leased, outcome: z.literal('success') }),
  z.object({ ...leased, outcome: z.literal('failure'), error: z.string().min(1).max(2000) }),
])

/**
 * `/v1/operations`: the guard for agents in any language. Claim a key, then report what the call
 * did; compensable tools record their undo before calling. Behind the agents' tokens (none: refused).
 *
 * Every key named here lives in the agents' space (`agents/<key>` in the ledger), within the calling
 * token's prefixes: the service's own operations (forwards, routes, alerts, handlers' steps) cannot
 * be claimed, read, waited on or settled from here, whatever key is named.
 */
export function operationRoutes(deps: {
  db: Database
  protocol: AgentProtocol
  agentTokens: readonly AgentToken[]
  bodyLimitBytes: number
  backpressure: Backpressure
  tracing?: Tracing | undefined
}) {
  const tracing = deps.tracing ?? TRACING_OFF
  return new Hono<{ Variables: AgentVariables }>()
    .use('*', agentAuth(deps.agentTokens))
    .use('*', limitBody(deps.bodyLimitBytes, '/v1/operations'))
    .post('/claim', async (c) => {
      const body = await parseJsonBody(c, claimBody)
      const target = scopedKey(c, body.key)
      // A claim writes to the ledger like a delivery: refused the same way when it cannot keep up.
      const refusal = deps.backpressure.refusal()
      if (refusal !== undefined) throw busy(refusal)
      const token = c.get('agent')
      if (token.tools !== null && !token.tools.has(body.tool)) {
        throw new ApiError(403, 'tool_out_of_scope', `this token may not use the tool '${body.tool}'`)
      }
      return traced(tracing, c, 'operation claim', async (span) => {
        // The operation keeps the trace it was claimed in (observability only), unless the agent named one.
        const traceId = body.traceId ?? (span.isRecording() ? span.spanContext().traceId : undefined)
        const answer = await deps.protocol.claim({ ...body, key: target, traceId }, callerOf(token))
        if (span.isRecording()) {
          span.setAttributes({
            'hookledger.operation.key': target,
            'hookledger.tool': body.tool,
            'hookledger.effect': body.effect,
            'hookledger.decision': answer.kind,
            ...('operationId' in answer ? { 'hookledger.operation.id': answer.operationId } : {}),
          })
        }
        return respond(answer)
      })
    })
    .get('/:key', async (c) => {
      const target = scopedKey(c, operationKey(c))
      const caller = callerOf(c.get('agent'))
      const wait = waitQuery(c)
      if (wait === undefined) {
        const op = await findOperation(deps.db, target)
        if (op === undefined || !mayTouch(caller, op)) throw notFound()
        return c.json(await operationBody(deps.db, op))
      }
      const waited = await waitForOperation(deps.db, target, { ...wait, signal: c.req.raw.signal })
      if (waited.kind === 'not_found' || !mayTouch(caller, waited.op)) throw notFound()
      return c.json({ ...(await operationBody(deps.db, waited.op)), changed: waited.kind === 'changed' })
    })
    .post('/:key/undo-ref', async (c) => {
      const target = scopedKey(c, operationKey(c))
      const body = await parseJsonBody(c, undoRefBody)
      const caller = callerOf(c.get('agent'))
      return report(
        await deps.protocol.recordUndoRef(caller, target, body.leaseToken, body.attempt, body.undoRef),
      )
    })
    .post(
      '/:key/outcome',
      settlement(tracing, outcomeBody, 'operation outcome', deps.protocol.recordOutcome, (body) =>
        body.outcome === 'success'
          ? { kind: 'success' as const, result: body.result, downstreamId: body.downstreamId }
          : { kind: body.outcome, error: body.error },
      ),
    )
    .post(
      '/:key/undo-outcome',
      settlement(
        tracing,
        undoOutcomeBody,
        'operation undo outcome',
        deps.protocol.recordUndoOutcome,
        (body) =>
          body.outcome === 'success'
            ? { kind: 'success' as const }
            : { kind: 'failure' as const, error: body.error },
      ),
    )
}

/**
 * A leased report of what a call did, or of what its undo did: the key checked against the token
 * before the body, each in a span of its own, and answered as the claim would have been.
 */
function settlement<T extends z.ZodType<{ leaseToken: string; attempt: number; outcome: string }>, O>(
  tracing: Tracing,
  schema: T,
  spanName: string,
  record: (
    caller: AgentCaller,
    key: string,
    leaseToken: string,
    attempt: number,
    outcome: O,
  ) => Promise<AgentReport>,
  outcomeOf: (body: z.infer<T>) => O,
) {
  return async (c: AgentContext) => {
    const target = scopedKey(c, operationKey(c))
    const body = await parseJsonBody(c, schema)
    const caller = callerOf(c.get('agent'))
    return traced(tracing, c, spanName, async (span) => {
      const result = await record(caller, target, body.leaseToken, body.attempt, outcomeOf(body))
      if (span.isRecording()) {
        span.setAttributes({
          'hookledger.operation.key': target,
          'hookledger.outcome': body.outcome,
          'hookledger.report': result.kind,
          ...(result.kind === 'recorded' ? { 'hookledger.decision': result.outcome.kind } : {}),
        })
      }
      return report(result)
    })
  }
}

/**
 * Runs an agent's call in a span of its own, continuing the agent's trace when its request carries a
 * `traceparent` (as the forward that told it about the event did): its claims and settlements then
 * sit in the inbound event's trace. The header is read only when tracing is on.
 */
async function traced(
  tracing: Tracing,
  c: AgentContext,
  name: string,
  run: (span: Span) => Promise<Response>,
): Promise<Response> {
  const span = tracing.tracer.startSpan(
    name,
    { kind: SpanKind.SERVER },
    tracing.enabled ? contextUnder(c.req.header('traceparent')) : undefined,
  )
  try {
    const response = await run(span)
    span.setAttribute('http.response.status_code', response.status)
    return response
  } catch (error) {
    span.setAttribute('http.response.status_code', error instanceof ApiError ? error.status : 500)
    throw error
  } finally {
    span.end()
  }
}

const notFound = () => new ApiError(404, 'operation_not_found', 'no operation has that key')

const callerOf = (token: AgentToken): AgentCaller => ({ actor: `agent:${token.name}`, tools: token.tools })

const mayTouch = (caller: AgentCaller, op: OperationRow) => caller.tools === null || caller.tools.has(op.tool)

/**
 * The ledger key of an agent's key, once the calling token may name it: outside its prefixes is a
 * 403 that says so (it reveals nothing: the answer depends on the key alone, never on the ledger).
 */
function scopedKey(c: AgentContext, agentKey: string): string {
  const token = c.get('agent')
  if (token.keyPrefixes !== null && !token.keyPrefixes.some((prefix) => agentKey.startsWith(prefix))) {
    throw new ApiError(
      403,
      'key_out_of_scope',
      `token '${token.name}' may use only keys starting with ${token.keyPrefixes.map((p) => `'${p}'`).join(', ')}`,
    )
  }
  return agentLedgerKey(agentKey)
}

async function operationBody(db: Database, op: OperationRow) {
  const attempts = await listAttempts(db, op.id)
  return {
    key: agentKeyOf(op.operationKey) ?? op.operationKey,
    /** The key the ledger keeps it under: what a provider must echo for an evidence rule to settle it. */
    ledgerKey: op.operationKey,
    tool: op.tool,
    effect: op.effectClass,
    status: op.status,
    payloadHash: op.payloadHash,
    result: op.resultJson,
    downstreamId: op.downstreamId,
    lastError: op.lastError,
    evidence: op.evidence,
    attempts: attempts.map((a) => ({ attempt: a.attempt, attemptKey: a.attemptKey, status: a.status })),
  }
}

const WAIT = /^(\d{1,6})(ms|s)?$/

/**
 * `?wait=30s` (or `500ms`, or plain seconds) and the optional `&status=` last seen: a long poll until
 * the status differs from it. Absent: an ordinary read. Over MAX_WAIT_MS is refused, not shortened,
 * so a client never mistakes a cut-short wait for the one it asked for.
 */
function waitQuery(c: Context): { timeoutMs: number; from: OperationStatus | undefined } | undefined {
  const wait = c.req.query('wait')
  const status = c.req.query('status')
  if (wait === undefined) {
    if (status !== undefined) throw new ApiError(400, 'invalid_wait', 'status is given only with wait')
    return undefined
  }
  const match = WAIT.exec(wait)
  const timeoutMs = match === null ? Number.NaN : Number(match[1]) * (match[2] === 'ms' ? 1 : 1000)
  if (!(timeoutMs <= MAX_WAIT_MS)) {
    throw new ApiError(
      400,
      'invalid_wait',
      `wait must be a duration such as 30s or 500ms, at most ${MAX_WAIT_MS / 1000}s`,
    )
  }
  if (status !== undefined && !isOperationStatus(status)) {
    throw new ApiError(400, 'invalid_wait', `status must be one of ${operationStatus.enumValues.join(', ')}`)
  }
  return { timeoutMs, from: status }
}

const isOperationStatus = (value: string): value is OperationStatus =>
  (operationStatus.enumValues as readonly string[]).includes(value)

/** The `:key` of the path, checked like a body's key: a NUL in the URL must be a 400, not a failed query. */
function operationKey(c: Context): string {
  const value = c.req.param('key') ?? ''
  const problem =
    value.length === 0 || value.length > MAX_AGENT_KEY_LENGTH
      ? `must be 1 to ${MAX_AGENT_KEY_LENGTH} characters`
      : unstorableText(value)
  if (problem !== undefined) throw new ApiError(400, 'invalid_key', `the operation key ${problem}`)
  return value
}

function json(body: unknown, status = 200, headers: Record<string, string> = {}) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  })
}

type Answer = AgentClaim | { kind: 'claim_again'; operationId: string; retryAfterMs: number }

/** The one mapping from the guard's answers to HTTP: decisions are 200, refusals are errors. */
function respond(answer: Answer): Response {
  switch (answer.kind) {
    case 'execute':
      return json({
        decision: 'execute',
        operationId: answer.operationId,
        ledgerKey: answer.ledgerKey,
        leaseToken: answer.leaseToken,
        leaseUntil: answer.leaseUntil.toISOString(),
        attempt: answer.attempt,
        idempotencyKey: answer.attemptKey,
        undoRefRequired: answer.undoRefRequired,
      })
    case 'undo':
      return json({
        decision: 'undo',
        operationId: answer.operationId,
        leaseToken: answer.leaseToken,
        attempt: answer.attempt,
        idempotencyKey: answer.attemptKey,
        undoRef: answer.undoRef,
      })
    case 'claim_again':
      return json({
        decision: 'claim_again',
        operationId: answer.operationId,
        retryAfterMs: answer.retryAfterMs,
      })
    case 'completed':
      return json({
        decision: 'completed',
        operationId: answer.operationId,
        result: answer.result,
        downstreamId: answer.downstreamId,
        replayed: answer.replayed,
      })
    case 'retry_later': {
      const seconds = String(Math.max(1, Math.ceil(answer.retryAfterMs / 1000)))
      throw new ApiError(409, 'operation_in_progress', 'another caller holds this operation; retry later', {
        headers: { 'Retry-After': seconds },
      })
    }
    case 'payload_conflict':
      throw new ApiError(422, 'payload_conflict', answer.message)
    case 'needs_reconciliation':
      return json({
        decision: 'escalated',
        status: 'needs_reconciliation',
        operationId: answer.operationId,
        reason: answer.reason,
      })
    case 'awaiting_approval':
      return json({
        decision: 'escalated',
        status: 'awaiting_approval',
        operationId: answer.operationId,
        approvalId: answer.approvalId,
      })
    case 'exhausted':
      return json({
        decision: 'exhausted',
        operationId: answer.operationId,
        attempts: answer.attempts,
        error: answer.error,
      })
    case 'failed':
      return json({
        decision: 'failed',
        operationId: answer.operationId,
        reason: answer.reason,
        error: answer.error,
      })
    case 'abandoned':
      return json({ decision: 'abandoned', operationId: answer.operationId })
    default:
      return assertNever(answer)
  }
}

function report(result: AgentReport): Response {
  switch (result.kind) {
    case 'recorded':
      return respond(result.outcome)
    case 'not_found':
      throw new ApiError(404, 'operation_not_found', 'no operation has that key')
    case 'lease_lost':
      throw new ApiError(409, 'lease_lost', 'this lease token no longer holds the operation; claim again')
    case 'attempt_mismatch':
      throw new ApiError(409, 'attempt_mismatch', result.message)
    default:
      return assertNever(result)
  }
}
