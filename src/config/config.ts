import { readFile } from 'node:fs/promises'
import { Webhook } from 'standardwebhooks'
import { z } from 'zod'
import {
  type BackfillConfig,
  type BackfillProvider,
  backfillConfigSchema,
  backfillProblems,
  backfillProvider,
  DEFAULT_API_BASE_URL,
} from '../backfill/config.js'
import { backpressureSchema } from '../inbound/backpressure.js'
import { dedupKeySchema } from '../inbound/dedup-key.js'
import { evidenceRulesSchema } from '../inbound/evidence-rules.js'
import {
  createVerifier,
  eventIdIsSigned,
  type Verifier,
  verifyConfigSchema,
} from '../inbound/verifiers/index.js'
import { unsignedDedupParts } from '../inbound/verifiers/signed-parts.js'
import { outboundSettingsSchema } from '../outbound/settings.js'
import { type AgentToken, agentsSchema, resolveNamedAgentTokens } from './agents.js'
import { type AlertChannelConfig, alertsSchema } from './alerts.js'
import { ConfigError } from './errors.js'
import { orderingKeySchema, routeForwardSchema, routesSchema } from './routes.js'

const SOURCE_ID = /^[a-z0-9][a-z0-9_-]{0,62}$/

/** How long a source keeps its DONE events when its config does not say (`retentionDays`). */
export const DEFAULT_RETENTION_DAYS = 30

const statementTimeout = (defaultMs: number) => z.number().int().min(100).max(3_600_000).default(defaultMs)

const forwardHandlerSchema = z.object({
  /**
   * `forward`: POST each event's raw body and signature headers to `url`. It is the source's one
   * route (`<source>/forward` on /metrics, in alerts and on /admin/routes): a route forward's
   * `headers`, rate limit, concurrency cap, circuit breaker and 410 Gone handling apply to it.
   */
  type: z.literal('forward'),
  ...routeForwardSchema.shape,
})

export const handlerConfigSchema = z.discriminatedUnion('type', [forwardHandlerSchema])
export type HandlerConfig = z.infer<typeof handlerConfigSchema>

const sourceSchema = z.object({
  /** The source's name: its webhooks arrive at `/webhooks/<id>`. */
  id: z.string().regex(SOURCE_ID, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
  /** How deliveries are verified: the provider's signature scheme and its secrets (`env:NAME` reads a variable). */
  verify: verifyConfigSchema,
  /** Absent when the handler is registered in code (`handlers: { [id]: fn }`). */
  handler: handlerConfigSchema.optional(),
  /**
   * Instead of one handler: each route whose filter matches gets the event, as its own operation
   * (see src/delivery/fan-out.ts). The event is DONE when every matched route is.
   */
  routes: routesSchema.optional(),
  /**
   * Events whose body has the same value at this JSON pointer are processed one at a time, in the
   * order they were received; a failing one holds back only the events with its key.
   */
  orderingKey: orderingKeySchema.optional(),
  /** This source's largest body (413 above it); unset, `server.bodyLimitBytes`. */
  bodyLimitBytes: z
    .number()
    .int()
    .min(1)
    .max(64 * 1024 * 1024)
    .optional(),
  /**
   * DONE events older than this are deleted. Dedup lasts exactly as long as the row: a provider retry
   * arriving later is accepted as new, so keep this longer than the provider retries.
   */
  retentionDays: z.number().int().min(1).max(3650).default(DEFAULT_RETENTION_DAYS),
  /**
   * Also answer `duplicate` to a delivery whose body equals a kept event's body under another id, for
   * as long as that row is kept (retentionDays). Default: on where the signature does not cover the
   * event id (github, shopify, hmac with an unsigned id header), off elsewhere.
   */
  dedupOnBody: z.boolean().optional(),
  /**
   * What identifies an event when the provider's event id alone does not: JSON pointers and headers,
   * optionally scoped by event type, under a version the ledger records (docs/providers.md).
   */
  dedupKey: dedupKeySchema.optional(),
  /**
   * Which of this source's events settle an outbound operation whose outcome is unknown (a provider's
   * `payment_intent.succeeded` carrying the operation key in its metadata). See docs/closing-the-loop.md.
   */
  evidence: evidenceRulesSchema.optional(),
  /** Fetch back what the provider sent while this endpoint could not take it (docs/backfill.md). */
  backfill: backfillConfigSchema.optional(),
})

const checkedSourceSchema = sourceSchema.superRefine((source, context) => {
  if (source.backfill === undefined) return
  for (const [field, message] of backfillProblems(source.verify.scheme, source.backfill)) {
    context.addIssue({ code: 'custom', message, path: field === null ? ['backfill'] : ['backfill', field] })
  }
})

export const configFileSchema = z.object({
  /** The senders whose webhooks this server takes, one entry each. */
  sources: z.array(checkedSourceSchema),
  /** The HTTP server: body limits and timeouts against slow or oversized clients. */
  server: z
    .object({
      /** The largest webhook body any source takes (413 above it). */
      bodyLimitBytes: z
        .number()
        .int()
        .min(1)
        .max(64 * 1024 * 1024)
        .default(1024 * 1024),
      /** The largest body `/v1/operations` reads: an agent's args are small, a 60 MB one is an attack. */
      operationsBodyLimitBytes: z
        .number()
        .int()
        .min(1024)
        .max(64 * 1024 * 1024)
        .default(1024 * 1024),
      /** A client still sending its headers after this long is answered 408 and cut off (slowloris). */
      headersTimeoutMs: z.number().int().min(100).max(600_000).default(20_000),
      /** A client still sending its request (headers and body) after this long is answered 408 and cut off. */
      requestTimeoutMs: z.number().int().min(100).max(3_600_000).default(30_000),
      /**
       * An idle keep-alive connection is closed after this long. Above the usual 60 s idle timeout of
       * load balancers, so the balancer, not this server, closes first and never reuses a socket that
       * is being closed under it (a reset for the next request).
       */
      keepAliveTimeoutMs: z.number().int().min(1000).max(600_000).default(65_000),
      /** When the ledger cannot keep up: 429 with Retry-After for new deliveries and agents' claims. */
      backpressure: backpressureSchema,
    })
    // Node refuses to start a server whose headers timeout exceeds its request timeout.
    .refine((server) => server.headersTimeoutMs <= server.requestTimeoutMs, {
      message: 'headersTimeoutMs must not exceed requestTimeoutMs',
      path: ['headersTimeoutMs'],
    })
    .prefault({}),
  /** The worker that runs handlers and forwards: how many at once, and how often it retries. */
  worker: z
    .object({
      /** Handlers and forwards running at once in this process. */
      concurrency: z.number().int().min(1).max(256).default(8),
      /** Attempts of an event (the first included) before it is FAILED. */
      maxAttempts: z.number().int().min(1).max(100).default(8),
      /** The wait after an event's first failed attempt; it doubles after each further one. */
      backoffBaseMs: z.number().int().min(1).default(1000),
      /** The longest wait between two attempts of an event. */
      backoffMaxMs: z
        .number()
        .int()
        .min(1)
        .default(60 * 60 * 1000),
      /** An attempt that runs longer is aborted and its transaction rolled back. */
      handlerTimeoutMs: z.number().int().min(100).default(30_000),
      /** How long a crashed worker's row stays locked out before another worker takes it over. */
      leaseMs: z.number().int().min(1000).default(60_000),
      /** How often BullMQ looks for jobs whose worker died (and hands them to another). */
      stalledIntervalMs: z.number().int().min(500).default(30_000),
    })
    .refine((worker) => worker.leaseMs > worker.handlerTimeoutMs, {
      message: 'leaseMs must be longer than handlerTimeoutMs',
      path: ['leaseMs'],
    })
    .prefault({}),
  /** The relay: hands committed events with no job (Redis was down, the process died) to the queue. */
  relay: z
    .object({
      /** How often the relay looks for committed events that have no job. */
      intervalMs: z.number().int().min(50).default(1000),
      /** A committed row with no job this long after it arrived is handed to the queue by the relay. */
      graceMs: z.number().int().min(0).default(2000),
      /** A row whose job has been silent this long is checked against Redis and re-enqueued if lost. */
      orphanAfterMs: z.number().int().min(1000).default(60_000),
    })
    .prefault({}),
  /** Deleting what is kept no longer: DONE events after their source's `retentionDays`, settled operations after `operationDays`. */
  retention: z
    .object({
      /** How often the worker deletes expired DONE events. */
      intervalMs: z
        .number()
        .int()
        .min(1000)
        .default(60 * 60 * 1000),
      /** Rows per DELETE, so a large backlog never holds long locks. */
      batchSize: z.number().int().min(1).max(100_000).default(1000),
      /**
       * Settled outbound operations (completed, compensated, exhausted, failed, abandoned) are
       * deleted this many days after their last change, with their attempts, approvals, audit
       * entries and settled evidence; open ones never are. Kept longer than a source's
       * `retentionDays`, a forward's operation still stops a provider's late retry from being sent
       * again after its event was deleted.
       */
      operationDays: z.number().int().min(1).max(3650).default(90),
    })
    .prefault({}),
  /** Routes: rechecks of paused (410 Gone) and ordered deliveries. */
  delivery: z
    .object({
      /** How often a delivery to a route disabled by a 410 Gone looks whether it was re-enabled. */
      pausedRecheckMs: z.number().int().min(100).max(3_600_000).default(30_000),
      /** How often an event held back by its ordering key looks whether the one before it is done. */
      orderingRecheckMs: z.number().int().min(50).max(600_000).default(1000),
    })
    .prefault({}),
  /** Where alerts go (Standard Webhooks-signed webhook, Slack) and which conditions raise them. */
  alerts: alertsSchema,
  /** The outbound ledger's leases, bounded backoff, reconciliation timing and SSRF allow-list. */
  outbound: outboundSettingsSchema,
  /** Named tokens of the agents' API, each scoped to key prefixes (README "Trust model"). */
  agents: agentsSchema,
  /** The PostgreSQL pool of this process. */
  database: z
    .object({
      /**
       * Connections this process may open to PostgreSQL. Unset: 10 for --role api, worker.concurrency
       * + 4 for --role worker, worker.concurrency + 8 for --role all (see ledgerPoolSize in src/db/client.ts).
       */
      poolSize: z.number().int().min(2).max(1000).optional(),
      /**
       * How long a statement may wait for its answer, per part of the process; past it the statement
       * fails (a request answers 503) and its connection is dropped. A silent network gives no error
       * of its own, so this is what notices it (see openLedger in src/db/client.ts).
       */
      statementTimeoutMs: z
        .object({
          /** The HTTP routes: a provider waits for the answer (many give up after 10-30 s). */
          request: statementTimeout(5000),
          /** Jobs: leases, DONE marks, the outbound ledger, a code handler's transaction statements. */
          worker: statementTimeout(15_000),
          relay: statementTimeout(10_000),
          /** Deletes in batches of `retention.batchSize`. */
          retention: statementTimeout(60_000),
          reconciler: statementTimeout(15_000),
          /** The alert conditions count over the ledger's tables. */
          alerts: statementTimeout(30_000),
          backfill: statementTimeout(15_000),
        })
        .prefault({}),
    })
    .prefault({}),
  /** The BullMQ queues (with REDIS_URL). */
  queue: z
    .object({
      /** Defaults to one derived from the database's deployment id, so deployments never share jobs. */
      prefix: z
        .string()
        .regex(/^[A-Za-z0-9_.-]{1,64}$/)
        .optional(),
    })
    .prefault({}),
})

export type ConfigFile = z.infer<typeof configFileSchema>
export type SourceConfig = z.infer<typeof sourceSchema>

/** A source ready to receive: its settings plus a verifier whose secrets were checked at start-up. */
export interface Source {
  config: SourceConfig
  verifier: Verifier
  bodyLimitBytes: number
  /** Whether a resent body under a fresh event id is a duplicate (see sourceSchema.dedupOnBody). */
  dedupOnBody: boolean
  /** Present when the source has a backfill block. */
  backfill?: SourceBackfill
}

/** A source's backfill, ready to run: its provider, its API and the key from the environment. */
export interface SourceBackfill {
  config: BackfillConfig
  provider: BackfillProvider
  apiBaseUrl: string
  /** The environment variable the key is read from, for messages (never the key). */
  credentialName: string
  /**
   * The API key. Required at start-up when backfill is enabled, so a missing variable stops the
   * start; for a disabled source only when one source is built (`hookledger backfill --source`).
   */
  credential: string | undefined
}

export interface Config {
  file: ConfigFile
  sources: ReadonlyMap<string, Source>
  /** The alert channels with their secrets and URLs resolved (`env:NAME` looked up). */
  alertChannels: readonly AlertChannelConfig[]
  /** The agents' API's named tokens (`agents.tokens`), secrets looked up; AGENT_TOKEN is not among them. */
  agentTokens: readonly AgentToken[]
}

export interface BuildOptions {
  /**
   * Build the verifier of this source only (`sign` and `replay` use one source): every source is
   * still checked against the schema, but another source's secrets are not looked up, so a secret
   * missing for an unrelated source does not block this one.
   */
  onlySource?: string
}

/**
 * Validates a parsed config file and builds its verifiers. Every problem names the source and the
 * field; secrets named as `env:NAME` are resolved through `lookup`, so none needs to be in the file.
 */
export function buildConfig(
  input: unknown,
  lookup: (name: string) => string | undefined,
  options: BuildOptions = {},
): Config {
  const parsed = configFileSchema.safeParse(input)
  if (!parsed.success) {
    throw new ConfigError(
      `invalid config:\n${parsed.error.issues.map((issue) => `  - ${describePath(input, issue.path)}: ${issue.message}`).join('\n')}`,
    )
  }
  const problems: string[] = []
  const sources = new Map<string, Source>()
  const seenIds = new Set<string>()
  for (const source of parsed.data.sources) {
    const where = `source '${source.id}'`
    if (seenIds.has(source.id)) {
      problems.push(`${where}: id is used by another source`)
      continue
    }
    seenIds.add(source.id)
    if (source.handler !== undefined && source.routes !== undefined) {
      problems.push(`${where}: has both "handler" and "routes"; a source delivers through one of them`)
      continue
    }
    const dedupOnBody = source.dedupOnBody ?? !eventIdIsSigned(source.verify)
    for (const problem of unsignedDedupParts(source.verify, source.dedupKey, dedupOnBody)) {
      problems.push(`${where}: ${problem}`)
    }
    if (options.onlySource !== undefined && source.id !== options.onlySource) continue
    const resolveSecret = (reference: string, field: string) =>
      resolveSecretReference(reference, field, lookup)
    try {
      const verifier = createVerifier(source.verify, { sourceId: source.id, resolveSecret })
      const backfill =
        source.backfill === undefined
          ? undefined
          : resolveBackfill(source.backfill, source.verify.scheme, lookup, {
              credentialRequired: source.backfill.enabled || options.onlySource === source.id,
            })
      sources.set(source.id, {
        config:
          source.routes === undefined
            ? source
            : { ...source, routes: resolveRouteHeaders(source.routes, resolveSecret) },
        verifier,
        bodyLimitBytes: source.bodyLimitBytes ?? parsed.data.server.bodyLimitBytes,
        dedupOnBody,
        ...(backfill === undefined ? {} : { backfill }),
      })
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems.push(`${where}: ${error.message}`)
    }
  }
  const alertChannels =
    options.onlySource === undefined ? resolveAlertChannels(parsed.data, lookup, problems) : []
  const agentTokens = options.onlySource === undefined ? namedAgentTokens(parsed.data, lookup, problems) : []
  if (problems.length > 0) {
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
  return { file: parsed.data, sources, alertChannels, agentTokens }
}

function namedAgentTokens(
  file: ConfigFile,
  lookup: (name: string) => string | undefined,
  problems: string[],
): AgentToken[] {
  try {
    return resolveNamedAgentTokens(file.agents, lookup)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    problems.push(error.message)
    return []
  }
}

/** Route forward headers may carry credentials as `env:NAME`, like every other secret in the file. */
function resolveRouteHeaders(
  routes: NonNullable<SourceConfig['routes']>,
  resolveSecret: (reference: string, field: string) => string,
): NonNullable<SourceConfig['routes']> {
  return routes.map((route) => {
    const headers = route.forward?.headers
    if (route.forward === undefined || headers === undefined) return route
    const resolved = Object.fromEntries(
      Object.entries(headers).map(([name, value]) => [
        name,
        resolveSecret(value, `routes '${route.id}': forward.headers.${name}`),
      ]),
    )
    return { ...route, forward: { ...route.forward, headers: resolved } }
  })
}

/** Each channel with its `env:` references looked up and its signing secret checked, or a problem. */
function resolveAlertChannels(
  file: ConfigFile,
  lookup: (name: string) => string | undefined,
  problems: string[],
): AlertChannelConfig[] {
  return file.alerts.channels.flatMap((channel): AlertChannelConfig[] => {
    const where = `alerts channel '${channel.id}'`
    try {
      if (channel.type === 'slack') {
        const url = resolveSecretReference(channel.url, 'url', lookup)
        if (!/^https?:\/\//.test(url)) throw new ConfigError('url: must be an http:// or https:// URL')
        return [{ ...channel, url }]
      }
      const secret = resolveSecretReference(channel.secret, 'secret', lookup)
      try {
        new Webhook(secret)
      } catch {
        throw new ConfigError('secret: must be a Standard Webhooks secret (whsec_ and base64)')
      }
      return [{ ...channel, secret }]
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems.push(`${where}: ${error.message}`)
      return []
    }
  })
}

/** A secret as the config file names it: `env:NAME` is looked up, anything else is the value itself. */
export function resolveSecretReference(
  reference: string,
  field: string,
  lookup: (name: string) => string | undefined,
): string {
  if (!reference.startsWith('env:')) return reference
  const name = reference.slice('env:'.length)
  const value = lookup(name)
  if (value === undefined) throw new ConfigError(`${field}: environment variable ${name} is not set`)
  return value
}

function resolveBackfill(
  config: BackfillConfig,
  scheme: string,
  lookup: (name: string) => string | undefined,
  options: { credentialRequired: boolean },
): SourceBackfill {
  const provider = backfillProvider(scheme)
  // The schema refused every other scheme already; this keeps the type honest.
  if (provider === undefined) throw new ConfigError(`backfill: not available for scheme '${scheme}'`)
  const credentialName = config.credential.slice('env:'.length)
  const credential = lookup(credentialName)
  if (credential === undefined && options.credentialRequired) {
    throw new ConfigError(`backfill.credential: environment variable ${credentialName} is not set`)
  }
  if (credential?.trim() === '') {
    throw new ConfigError(`backfill.credential: environment variable ${credentialName} is empty`)
  }
  return {
    config,
    provider,
    apiBaseUrl: (config.apiBaseUrl ?? DEFAULT_API_BASE_URL[provider]).replace(/\/+$/, ''),
    credentialName,
    credential,
  }
}

/** Reads and validates the config file at `path`. */
export async function loadConfig(
  path: string,
  lookup: (name: string) => string | undefined,
  options: BuildOptions = {},
): Promise<Config> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    throw new ConfigError(
      `cannot read config file ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`,
    )
  }
  let input: unknown
  try {
    input = JSON.parse(text)
  } catch (error) {
    throw new ConfigError(`config file ${path} is not valid JSON: ${(error as Error).message}`)
  }
  return buildConfig(input, lookup, options)
}

/** `sources[2].verify.secrets` → `source 'acme': verify.secrets`, so an error points at a source by name. */
function describePath(input: unknown, path: PropertyKey[]): string {
  if (path[0] === 'sources' && typeof path[1] === 'number') {
    const entry = (input as { sources?: unknown[] }).sources?.[path[1]]
    const id = typeof entry === 'object' && entry !== null && 'id' in entry ? String(entry.id) : `#${path[1]}`
    const rest = formatPath(path.slice(2))
    return rest === '' ? `source '${id}'` : `source '${id}': ${rest}`
  }
  return formatPath(path) || '(root)'
}

function formatPath(path: PropertyKey[]): string {
  return path
    .map((part, i) => (typeof part === 'number' ? `[${part}]` : i === 0 ? String(part) : `.${String(part)}`))
    .join('')
}

export { ConfigError }
