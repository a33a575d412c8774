import { SpanKind } from '@opentelemetry/api'
import type postgres from 'postgres'
import type { Config } from '../config/config.js'
import type { EvidenceRule } from '../config/evidence.js'
import type { Database } from '../db/client.js'
import type { LeasedEvent } from '../db/events.js'
import { recordEvidence } from '../db/evidence.js'
import type { Logger } from '../logger.js'
import { settleFromEvidence } from '../outbound/evidence.js'
import type { SourceHandler } from '../queue/handler.js'
import type { TraceScope } from '../tracing.js'
import { readEvidence } from './evidence-rules.js'

/**
 * The first step of the worker's attempt at an event of a source with evidence rules (withEvidence):
 * keep what the event says about an outbound operation, then apply it if the operation's outcome is
 * unknown.
 *
 * Done by the worker rather than at intake: the receive path stays one batched INSERT per moment of
 * load (and an api-only process needs no outbound ledger), while the worker already guarantees every
 * committed event is processed, after a crash or a Redis outage too (the row stays PENDING until it is
 * DONE, and the relay re-enqueues it). Recording is idempotent and applying is one conditional
 * statement that marks the evidence applied, so a redelivered job or a second worker applies nothing
 * twice. It runs before the handler, so a failing handler never holds back the settlement.
 */
export interface EvidenceIntake {
  /** `trace`: the worker's span of the event, under which a settlement gets a span of its own. */
  take(event: LeasedEvent, trace?: TraceScope): Promise<void>
}

export function evidenceIntake(deps: {
  config: Config
  db: Database
  sql: postgres.Sql
  logger: Logger
}): EvidenceIntake | undefined {
  const rules = new Map<string, readonly EvidenceRule[]>()
  for (const [id, source] of deps.config.sources) {
    if (source.config.evidence !== undefined && source.config.evidence.length > 0) {
      rules.set(id, source.config.evidence)
    }
  }
  if (rules.size === 0) return undefined
  return {
    async take(event, trace) {
      const sourceRules = rules.get(event.source)
      if (sourceRules === undefined) return
      const reading = readEvidence(sourceRules, { eventType: event.eventType, body: parseBody(event.body) })
      if (reading.kind === 'not_evidence') return
      const log = deps.logger.child({ source: event.source, eventId: event.eventId })
      if (reading.kind === 'no_key') {
        // Usual for effects made elsewhere (a charge from the dashboard): nothing to settle.
        log.debug({ eventType: event.eventType }, reading.message)
        return
      }
      const { evidence } = reading
      await recordEvidence(
        deps.sql,
        {
          rowId: event.id,
          source: event.source,
          eventId: event.eventId,
          eventType: event.eventType,
          receivedAt: event.receivedAt,
        },
        evidence,
      )
      const span = trace?.tracer.startSpan(
        'operation settle by evidence',
        { kind: SpanKind.INTERNAL, attributes: { 'hookledger.operation.key': evidence.operationKey } },
        trace.context,
      )
      let settled: Awaited<ReturnType<typeof settleFromEvidence>>
      try {
        settled = await settleFromEvidence(deps.db, { key: evidence.operationKey })
        span?.setAttributes({
          'hookledger.settled': settled !== undefined,
          'hookledger.status': settled?.status ?? '',
        })
      } finally {
        span?.end()
      }
      if (settled !== undefined) {
        log.info(
          { operationKey: evidence.operationKey, status: settled.status },
          'an inbound event settled an operation whose outcome was unknown',
        )
      }
    },
  }
}

/**
 * A source's handler with its evidence rules' step first: the worker runs `before` ahead of the
 * handler on every attempt, outside the handler's transaction and deadline, so the settlement commits
 * on its own and a failing handler never holds it back. An evidence-only source's handler does
 * nothing else: its events are DONE once the step ran.
 */
export function withEvidence(handler: SourceHandler, intake: EvidenceIntake): SourceHandler {
  const next = handler.before
  return {
    ...handler,
    async before(event, trace) {
      await intake.take(event, trace)
      await next?.(event, trace)
    },
  }
}

function parseBody(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'))
  } catch {
    return undefined
  }
}
