import { z } from 'zod'
import { ConfigError } from './errors.js'

/**
 * A source's `backfill` block: fetching back what the provider sent while this endpoint could not
 * take it. The provider follows from the source's scheme (stripe lists its events, github asks for
 * redeliveries); the fields that only one provider reads are refused on the other (backfillProblems).
 */
export const backfillConfigSchema = z.object({
  enabled: z.boolean().default(true),
  /** How often the service runs a pass for this source. */
  intervalSeconds: z.number().int().min(1).max(86_400).default(300),
  /**
   * How far back a pass looks, at most: the first pass starts here, and a cursor older than this
   * (a long outage) is brought forward to it. Stripe lists 30 days of events; GitHub redelivers what
   * it delivered in the last 3 days.
   */
  lookbackHours: z.number().int().min(1).max(720).default(72),
  /** The provider's API; default the real one. Tests point it at a local server. */
  apiBaseUrl: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).optional(),
  /** `env:NAME`: the variable holding the API key (Stripe restricted key, GitHub token). Never the key itself. */
  credential: z
    .string()
    .regex(/^env:[A-Za-z_][A-Za-z0-9_]*$/, 'must be env:NAME, the environment variable holding the API key'),
  /** Pages one pass reads at most; a sweep with more continues in the next pass from where it stopped. */
  maxPagesPerPass: z.number().int().min(1).max(1000).default(50),
  /** Items per page (both providers allow 1–100). */
  pageSize: z.number().int().min(1).max(100).default(100),
  /**
   * A provider that asks to slow down (429, Retry-After, an exhausted rate limit) is waited for up
   * to this long within a pass; a longer wait ends the pass, and the next one resumes.
   */
  maxWaitSeconds: z.number().int().min(0).max(3600).default(60),
  /**
   * The deadline of one request to the provider, its whole body included: a connection that sends
   * headers and then trickles counts as an unanswered request (retried, then provider_unavailable).
   */
  requestTimeoutSeconds: z.number().int().min(1).max(600).default(30),
  /**
   * The largest answer body read from the provider. A longer one is abandoned at this size, before it
   * is all in memory, and ends the pass with response_too_large. The default leaves 160 KiB for each
   * of 100 items on a page.
   */
  maxResponseBytes: z
    .number()
    .int()
    .min(65_536)
    .max(1024 * 1024 * 1024)
    .default(16 * 1024 * 1024),
  /**
   * Stripe: list only events whose delivery to some endpoint failed or is still pending
   * (`delivery_success=false`); default true. A pass then never imports the account's history of
   * events that were delivered (to this receiver or one before it), only what went undelivered.
   * `false` lists every event, for a receiver that answered 2xx without keeping the event.
   */
  onlyFailedDeliveries: z.boolean().optional(),
  /** Stripe: the event types this endpoint is subscribed to (`types[]`, at most 20); absent: every type. */
  eventTypes: z
    .array(z.string().regex(/^[a-z0-9_.*]{1,100}$/))
    .min(1)
    .max(20)
    .optional(),
  /** GitHub: the repository whose webhook this source receives, `owner/name`. */
  repository: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}$/, 'must be owner/name')
    .optional(),
  /** GitHub: the webhook's id (Settings → Webhooks → the hook's URL ends with it). */
  hookId: z.number().int().min(1).optional(),
})

export type BackfillConfig = z.infer<typeof backfillConfigSchema>

export type BackfillProvider = 'stripe' | 'github'

export const DEFAULT_API_BASE_URL: Record<BackfillProvider, string> = {
  stripe: 'https://api.stripe.com',
  github: 'https://api.github.com',
}

const ONLY_FOR: Record<BackfillProvider, readonly (keyof BackfillConfig)[]> = {
  stripe: ['onlyFailedDeliveries', 'eventTypes'],
  github: ['repository', 'hookId'],
}

/** The provider a scheme's backfill talks to, or undefined when that provider has no list API here. */
export function backfillProvider(scheme: string): BackfillProvider | undefined {
  return scheme === 'stripe' || scheme === 'github' ? scheme : undefined
}

/** Problems with a backfill block given its source's scheme, each as [field, message]. */
export function backfillProblems(
  scheme: string,
  config: BackfillConfig,
): Array<[keyof BackfillConfig | null, string]> {
  const provider = backfillProvider(scheme)
  if (provider === undefined) {
    return [[null, `is available for stripe and github sources, not for scheme '${scheme}'`]]
  }
  const problems: Array<[keyof BackfillConfig | null, string]> = []
  for (const other of ['stripe', 'github'] as const) {
    if (other === provider) continue
    for (const field of ONLY_FOR[other]) {
      if (config[field] !== undefined)
        problems.push([field, `is a ${other} setting; this is a ${provider} source`])
    }
  }
  if (provider === 'github') {
    if (config.repository === undefined)
      problems.push(['repository', 'is required for a github source (owner/name)'])
    if (config.hookId === undefined)
      problems.push(['hookId', 'is required for a github source (the webhook id)'])
  }
  return problems
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

/** A checked backfill block with its provider's API and the key looked up. */
export function resolveBackfill(
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
