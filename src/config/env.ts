import { z } from 'zod'
import { TRACE_SAMPLERS, type TracingSettings } from '../tracing.js'
import { parseRedisUrl } from './redis-url.js'

/**
 * The only reader of the process environment. Everything else receives the parsed result, so tests
 * can pass their own values and no module depends on global state.
 */
const environmentSchema = z.object({
  /** Unset: embedded mode's own PostgreSQL in HOOKLEDGER_DATA_DIR (one process only). */
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/, error: 'must be a postgres:// URL' }).optional(),
  /** Embedded mode's data folder (its PostgreSQL cluster, password and lock). */
  HOOKLEDGER_DATA_DIR: z.string().min(1).default('./.hookledger'),
  /**
   * Unset: jobs run in an in-process queue, one process only (see src/queue/in-process.ts).
   * `redis+cluster://host:port,host:port` names a Redis Cluster (see src/config/redis-url.ts).
   */
  REDIS_URL: z
    .string()
    .superRefine((url, context) => {
      try {
        parseRedisUrl(url)
      } catch (error) {
        context.addIssue({ code: 'custom', message: error instanceof Error ? error.message : String(error) })
      }
    })
    .optional(),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  /**
   * Unset: 127.0.0.1 in embedded mode (DATABASE_URL unset: a laptop, where `/metrics` and the
   * webhooks should not face the network), 0.0.0.0 otherwise (a container or a server).
   */
  HOST: z.string().min(1).optional(),
  HOOKLEDGER_CONFIG: z.string().min(1).default('./hookledger.config.json'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Bearer token of `/admin/api/…` (operations, approvals). Unset: the admin API refuses every request. */
  ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Bearer token of `/v1/operations/…` (agents' claims and outcomes). Unset: that API refuses. */
  AGENT_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Bearer token of `/metrics`. Unset: `/metrics` is open to whoever reaches the port. */
  METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** OpenTelemetry traces: set either endpoint to turn them on (OTLP over HTTP, JSON). */
  OTEL_EXPORTER_OTLP_ENDPOINT: z
    .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
    .optional(),
  /** The traces URL itself (used as given); wins over OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z
    .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
    .optional(),
  OTEL_SERVICE_NAME: z.string().min(1).default('hookledger'),
  /** `true` turns tracing off whatever else is set. */
  OTEL_SDK_DISABLED: z.enum(['true', 'false'], { error: 'must be true or false' }).default('false'),
  OTEL_TRACES_SAMPLER: z.enum(TRACE_SAMPLERS).default('parentbased_always_on'),
  OTEL_TRACES_SAMPLER_ARG: z.coerce.number().min(0).max(1).default(1),
  /** Test-only: the name of a failpoint at which the process kills itself (see src/failpoints.ts). */
  HOOKLEDGER_FAILPOINT: z.string().min(1).optional(),
})

export type Environment = Omit<z.infer<typeof environmentSchema>, 'HOST'> & {
  HOST: string
  /** Looks up a variable named by the config file (`env:NAME` secrets). */
  lookup: (name: string) => string | undefined
}

export class EnvironmentError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid environment:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
    this.name = 'EnvironmentError'
  }
}

/** Parses the environment once; an empty string counts as unset. Throws naming every bad variable. */
export function readEnvironment(source: Record<string, string | undefined>): Environment {
  const present = Object.fromEntries(Object.entries(source).filter(([, value]) => value !== ''))
  const parsed = environmentSchema.safeParse(present)
  if (!parsed.success) {
    throw new EnvironmentError(
      parsed.error.issues.map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`),
    )
  }
  const { HOST, ...data } = parsed.data
  return {
    ...data,
    HOST: HOST ?? (data.DATABASE_URL === undefined ? '127.0.0.1' : '0.0.0.0'),
    lookup: (name) => (source[name] === '' ? undefined : source[name]),
  }
}

/** The tracing part of the environment: off unless an OTLP endpoint is set and the SDK not disabled. */
export function tracingSettings(env: Environment): TracingSettings {
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT
  const tracesUrl =
    env.OTEL_SDK_DISABLED === 'true'
      ? undefined
      : (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
        (base === undefined ? undefined : `${base.replace(/\/+$/, '')}/v1/traces`))
  return {
    tracesUrl,
    serviceName: env.OTEL_SERVICE_NAME,
    sampler: env.OTEL_TRACES_SAMPLER,
    samplerArg: env.OTEL_TRACES_SAMPLER_ARG,
  }
}

const clientEnvironmentSchema = environmentSchema.pick({
  PORT: true,
  HOOKLEDGER_CONFIG: true,
  LOG_LEVEL: true,
})

export type ClientEnvironment = z.infer<typeof clientEnvironmentSchema> & Pick<Environment, 'lookup'>

/**
 * For commands that read the config file but touch neither Postgres nor Redis (`sign`, `replay`):
 * they must work on a machine that has only the config and the secrets.
 */
export function readClientEnvironment(source: Record<string, string | undefined>): ClientEnvironment {
  const present = Object.fromEntries(Object.entries(source).filter(([, value]) => value !== ''))
  const parsed = clientEnvironmentSchema.safeParse(present)
  if (!parsed.success) {
    throw new EnvironmentError(
      parsed.error.issues.map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`),
    )
  }
  return { ...parsed.data, lookup: (name) => (source[name] === '' ? undefined : source[name]) }
}
