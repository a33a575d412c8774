import { describe, expect, it } from 'vitest'
import { EnvironmentError, readEnvironment, tracingSettings } from './config/env.js'
import { parseTraceparent, startTracing, TRACING_OFF } from './tracing.js'

describe('tracing settings from the environment', () => {
  const settings = (env: Record<string, string>) => tracingSettings(readEnvironment(env))

  it('is off without an endpoint, and starts nothing', async () => {
    expect(settings({})).toMatchObject({ tracesUrl: undefined, serviceName: 'hookledger' })
    expect(await startTracing(settings({}))).toBe(TRACING_OFF)
    expect(TRACING_OFF.tracer.startSpan('x').isRecording()).toBe(false)
  })

  it('appends /v1/traces to the base endpoint; the traces endpoint is used as given and wins', () => {
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracesUrl).toBe(
      'http://collector:4318/v1/traces',
    )
    expect(
      settings({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/otlp',
      }).tracesUrl,
    ).toBe('https://traces.example/otlp')
  })

  it('OTEL_SDK_DISABLED=true turns it off whatever the endpoint', () => {
    expect(
      settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }).tracesUrl,
    ).toBeUndefined()
  })

  it('names each bad variable', () => {
    expect(() =>
      readEnvironment({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318',
        OTEL_TRACES_SAMPLER: 'sometimes',
        OTEL_TRACES_SAMPLER_ARG: '2',
        OTEL_SDK_DISABLED: 'yes',
      }),
    ).toThrow(EnvironmentError)
    try {
      readEnvironment({
        OTEL_TRACES_SAMPLER: 'sometimes',
        OTEL_TRACES_SAMPLER_ARG: '2',
        OTEL_SDK_DISABLED: 'yes',
      })
    } catch (error) {
      const problems = (error as EnvironmentError).problems.join('\n')
      expect(problems).toContain('OTEL_TRACES_SAMPLER:')
      expect(problems).toContain('OTEL_TRACES_SAMPLER_ARG:')
      expect(problems).toContain('OTEL_SDK_DISABLED:')
    }
  })
})

describe('traceparent', () => {
  it('reads version 00 and refuses the rest', () => {
    const id = '0af7651916cd43dd8448eb211c80319c'
    expect(parseTraceparent(`00-${id}-b7ad6b7169203331-01`)).toMatchObject({
      traceId: id,
      spanId: 'b7ad6b7169203331',
      traceFlags: 1,
    })
    expect(parseTraceparent(`00-${'0'.repeat(32)}-b7ad6b7169203331-01`)).toBeUndefined()
    expect(parseTraceparent(`00-${id}-b7ad6b7169203331`)).toBeUndefined()
    expect(parseTraceparent('garbage')).toBeUndefined()
    expect(parseTraceparent(null)).toBeUndefined()
  })
})
