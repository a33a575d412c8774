import {
  type Context,
  isSpanContextValid,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  type Tracer,
  trace,
} from '@opentelemetry/api'

// OpenTelemetry traces, off unless an OTLP endpoint is configured. Off, every span is the API's
// no-op one (a private provider that is never given an SDK, so a global provider another library
// registers in the same process cannot turn hookledger's tracing on); the SDK and the exporter are
// imported only when tracing is on. Contexts are passed explicitly rather than through a global
// context manager: a receive and its worker span meet through the ledger row, not the call stack.

/** What the environment says about tracing (src/config/env.ts parses it). */
export interface TracingSettings {
  /** The OTLP/HTTP traces URL (…/v1/traces); undefined: tracing is off. */
  tracesUrl: string | undefined
  serviceName: string
  sampler: TraceSampler
  /** The ratio of the `traceidratio` samplers. */
  samplerArg: number
}

export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const
export type TraceSampler = (typeof TRACE_SAMPLERS)[number]

export interface Tracing {
  tracer: Tracer
  enabled: boolean
  /** Exports the spans still buffered, then stops exporting. */
  shutdown(): Promise<void>
}

/** Tracing off: the API's no-op tracer, and nothing to flush. */
export const TRACING_OFF: Tracing = {
  tracer: new ProxyTracerProvider().getTracer('hookledger'),
  enabled: false,
  shutdown: async () => {},
}

/** The parent a unit of work starts its spans under: the tracer and the context of its span. */
export interface TraceScope {
  tracer: Tracer
  context: Context
}

/**
 * Starts the tracer provider when an endpoint is configured. The SDK is loaded here, lazily, so a
 * process with tracing off never loads it.
 */
export async function startTracing(settings: TracingSettings): Promise<Tracing> {
  if (settings.tracesUrl === undefined) return TRACING_OFF
  const [{ NodeTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ])
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
    sampler: await samplerOf(settings),
    // Batched, so an export never sits on a request's or an event's path.
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.tracesUrl }))],
  })
  return {
    tracer: provider.getTracer('hookledger'),
    enabled: true,
    shutdown: () => provider.shutdown(),
  }
}

async function samplerOf(settings: TracingSettings) {
  const { AlwaysOnSampler, AlwaysOffSampler, ParentBasedSampler, TraceIdRatioBasedSampler } = await import(
    '@opentelemetry/sdk-trace-node'
  )
  switch (settings.sampler) {
    case 'always_on':
      return new AlwaysOnSampler()
    case 'always_off':
      return new AlwaysOffSampler()
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(settings.samplerArg)
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() })
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.samplerArg) })
    default:
      return settings.sampler satisfies never
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** A W3C `traceparent` (version 00) as a span context; undefined when it is not one, or all zeros. */
export function parseTraceparent(value: string | null | undefined): SpanContext | undefined {
  if (value === null || value === undefined) return undefined
  const match = TRACEPARENT.exec(value.trim())
  if (match === null) return undefined
  const [, traceId = '', spanId = '', flags = '00'] = match
  const parsed: SpanContext = { traceId, spanId, traceFlags: Number.parseInt(flags, 16) & 1, isRemote: true }
  return isSpanContextValid(parsed) ? parsed : undefined
}

/** The W3C `traceparent` of a span; undefined when the span is not recorded (tracing off, unsampled). */
export function traceparentOf(span: Span): string | undefined {
  if (!span.isRecording()) return undefined
  const { traceId, spanId, traceFlags } = span.spanContext()
  return `00-${traceId}-${spanId}-${(traceFlags & 1).toString(16).padStart(2, '0')}`
}

/** The trace id of a stored `traceparent`, for logs and the admin page. */
export function traceIdOf(traceparent: string | null | undefined): string | undefined {
  return parseTraceparent(traceparent)?.traceId
}

/** A context whose parent is `parent` (a stored or received traceparent), or the root one. */
export function contextUnder(parent: string | null | undefined): Context {
  const spanContext = parseTraceparent(parent)
  return spanContext === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, spanContext)
}

/** The scope of a recorded span's children; undefined when the span is not recorded. */
export function scopeOf(tracer: Tracer, span: Span): TraceScope | undefined {
  return span.isRecording() ? { tracer, context: trace.setSpan(ROOT_CONTEXT, span) } : undefined
}

/** The trace id of a scope's span: what an operation started under it records as its `trace_id`. */
export function traceIdIn(scope: TraceScope | undefined): string | undefined {
  return scope === undefined ? undefined : trace.getSpanContext(scope.context)?.traceId
}
