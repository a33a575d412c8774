import { type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { Hono, type Context as HonoContext, type MiddlewareHandler } from 'hono'
import type { RequestIdVariables } from 'hono/request-id'
import { assertNever } from '../../assert.js'
import type { Config, Source } from '../../config/config.js'
import type { RejectionCode } from '../../config/verifier.js'
import type { ClaimBatcher } from '../../db/claims.js'
import type { Backpressure } from '../../inbound/backpressure.js'
import { type ReceiveOutcome, receiveDelivery } from '../../inbound/receive.js'
import type { Logger } from '../../logger.js'
import { type Metrics, UNKNOWN_SOURCE_LABEL } from '../../metrics.js'
import type { Enqueuer } from '../../queue/enqueuer.js'
import type { HereLease } from '../../queue/worker.js'
import { contextUnder, TRACING_OFF, type Tracing } from '../../tracing.js'
import { ApiError, busy } from '../errors.js'
import { limitBody } from '../middleware/body-limit.js'

export interface WebhookRouteDependencies {
  config: Config
  claims: ClaimBatcher
  backpressure?: Backpressure
  enqueuer: Enqueuer
  /** This process's worker's place for a row it claims (Worker.reserveHere); absent: none. */
  reserveHere?: (() => HereLease | undefined) | undefined
  logger: Logger
  metrics: Metrics
  /** Absent: off (the no-op tracer). */
  tracing?: Tracing | undefined
}

type Variables = { source: Source } & RequestIdVariables

const REJECTION_STATUS: Record<RejectionCode, 400 | 401> = {
  missing_signature_headers: 400,
  malformed_signature_header: 400,
  too_many_signatures: 400,
  missing_event_id: 400,
  invalid_event_id: 400,
  invalid_json: 400,
  invalid_body: 400,
  invalid_signature: 401,
  timestamp_out_of_tolerance: 401,
}

export function webhookRoutes(deps: WebhookRouteDependencies) {
  const limits = new Map<string, MiddlewareHandler>()
  for (const [id, source] of deps.config.sources) {
    limits.set(id, limitBody(source.bodyLimitBytes, `source '${id}'`))
  }

  const resolveSource: MiddlewareHandler<{ Variables: Variables }> = async (c, next) => {
    const id = c.req.param('source') ?? ''
    const source = deps.config.sources.get(id)
    if (source === undefined) {
      deps.metrics.deliveries.inc({ source: UNKNOWN_SOURCE_LABEL, outcome: 'unknown_source' })
      throw new ApiError(404, 'unknown_source', `no source named '${id}' is configured`)
    }
    c.set('source', source)
    const limit = limits.get(id)
    if (limit === undefined) return next()
    try {
      return await limit(c, next)
    } catch (error) {
      if (error instanceof ApiError && error.status === 413) {
        deps.metrics.deliveries.inc({ source: id, outcome: 'payload_too_large' })
      }
      throw error
    }
  }

  const tracing = deps.tracing ?? TRACING_OFF
  return new Hono<{ Variables: Variables }>().post('/:source', resolveSource, async (c) => {
    const source = c.get('source')
    // A sender that traces (another hookledger's forward, say) has its trace continued; the header
    // is read only when tracing is on.
    const span = tracing.tracer.startSpan(
      RECEIVE_SPAN,
      RECEIVE_SPAN_OPTIONS,
      tracing.enabled ? contextUnder(c.req.header('traceparent')) : undefined,
    )
    try {
      const response = await receive(c, source, span)
      span.setAttribute('http.response.status_code', response.status)
      return response
    } catch (error) {
      if (span.isRecording()) {
        const status = error instanceof ApiError ? error.status : 500
        span.setAttribute('http.response.status_code', status)
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
      }
      throw error
    } finally {
      span.end()
    }
  })

  async function receive(c: HonoContext<{ Variables: Variables }>, source: Source, span: Span) {
    const raw = Buffer.from(await c.req.arrayBuffer())
    const outcome = await receiveDelivery(deps, source, raw, c.req.header(), span)
    if (span.isRecording()) {
      span.setAttributes({
        'http.request.method': 'POST',
        'http.route': '/webhooks/:source',
        'hookledger.source': source.config.id,
        'hookledger.outcome': outcome.kind === 'rejected' ? outcome.code : outcome.kind,
      })
      if ('id' in outcome) span.setAttribute('hookledger.event_row_id', outcome.id)
    }
    // Made only for the outcomes that log: a child logger per accepted delivery cost ~1 % of the intake.
    const log = () =>
      deps.logger.child({
        source: source.config.id,
        requestId: c.get('requestId'),
        ...(span.isRecording() ? { traceId: span.spanContext().traceId } : {}),
      })
    deps.metrics.deliveries.inc({
      source: source.config.id,
      outcome: outcome.kind === 'rejected' ? outcome.code : outcome.kind,
    })
    switch (outcome.kind) {
      case 'accepted':
        // After the commit, never before it; the response does not wait for Redis (the relay
        // covers an enqueue that fails or never happens). A row its claim leased runs here already.
        if (!outcome.startedHere) deps.enqueuer.enqueue(outcome.id)
        return c.json({ status: 'accepted', id: outcome.id }, 200)
      case 'duplicate':
        return c.json({ status: 'duplicate', id: outcome.id }, 200)
      case 'replay':
        // 200, so the sender stops; nothing is forwarded again. The id is the original's row.
        log().warn(
          { id: outcome.id },
          'signed body already received under another event id; not forwarded again',
        )
        return c.json({ status: 'duplicate', id: outcome.id }, 200)
      case 'handshake':
        return c.json(outcome.body as object, 200)
      case 'conflict':
        log().warn({ eventId: outcome.eventId, id: outcome.id }, 'event id reused with a different payload')
        throw new ApiError(
          409,
          'event_id_conflict',
          `event '${outcome.eventId}' was already received with a different payload; the original is kept`,
        )
      case 'rejected':
        log().info({ code: outcome.code }, 'delivery rejected')
        throw new ApiError(REJECTION_STATUS[outcome.code], outcome.code, outcome.message)
      case 'busy':
        throw busy(outcome.refusal)
      case 'ledger_unavailable':
        throw new ApiError(503, 'ledger_unavailable', 'the event ledger is unreachable; retry later', {
          headers: { 'Retry-After': '5' },
          cause: outcome.cause,
        })
      case 'ledger_read_only':
        throw new ApiError(
          503,
          'ledger_read_only',
          'the event ledger refuses writes (a standby, or a database made read-only); retry later',
          { headers: { 'Retry-After': '5' }, cause: outcome.cause },
        )
      case 'ledger_partition_missing':
        log().error({ err: outcome.cause }, 'claim refused: the ledger has no partition for now')
        throw new ApiError(
          503,
          'ledger_partition_missing',
          'the event ledger has no partition for this time yet; retry later',
          { headers: { 'Retry-After': '60' }, cause: outcome.cause },
        )
      default:
        return assertNever(outcome)
    }
  }
}

/** The receive's span name: the route, as HTTP server spans are named. */
export const RECEIVE_SPAN = 'POST /webhooks/:source'
// Made once: with tracing off, a delivery costs the no-op span and nothing more.
const RECEIVE_SPAN_OPTIONS = { kind: SpanKind.SERVER }

export type { ReceiveOutcome }
