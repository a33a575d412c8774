-- The W3C traceparent of the span that received the event (OpenTelemetry, when tracing is on), so
-- the worker's span of the event continues the receive's trace. Null when tracing is off.
ALTER TABLE "inbound_events" ADD COLUMN "trace_parent" text;
