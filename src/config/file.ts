import { readFile } from 'node:fs/promises'
import { z } from 'zod'
import { agentsSchema } from './agents.js'
import { alertsSchema } from './alerts.js'
import { ConfigError } from './errors.js'
import { outboundSettingsSchema } from './outbound.js'
import {
  databaseSchema,
  deliverySchema,
  queueSchema,
  relaySchema,
  retentionSchema,
  serverSchema,
  workerSchema,
} from './process.js'
import { checkedSourceSchema } from './source.js'

/** The config file: every section, each from the file of its concern in this folder. */
export const configFileSchema = z.object({
  /** The senders whose webhooks this server takes, one entry each. */
  sources: z.array(checkedSourceSchema),
  /** The HTTP server: body limits and timeouts against slow or oversized clients. */
  server: serverSchema,
  /** The worker that runs handlers and forwards: how many at once, and how often it retries. */
  worker: workerSchema,
  /** The relay: hands committed events with no job (Redis was down, the process died) to the queue. */
  relay: relaySchema,
  /** Deleting what is kept no longer: DONE events after their source's `retentionDays`, settled operations after `operationDays`. */
  retention: retentionSchema,
  /** Routes: rechecks of paused (410 Gone) and ordered deliveries. */
  delivery: deliverySchema,
  /** Where alerts go (Standard Webhooks-signed webhook, Slack) and which conditions raise them. */
  alerts: alertsSchema,
  /** The outbound ledger's leases, bounded backoff, reconciliation timing and SSRF allow-list. */
  outbound: outboundSettingsSchema,
  /** Named tokens of the agents' API, each scoped to key prefixes (README "Trust model"). */
  agents: agentsSchema,
  /** The PostgreSQL pool of this process. */
  database: databaseSchema,
  /** The BullMQ queues (with REDIS_URL). */
  queue: queueSchema,
})

export type ConfigFile = z.infer<typeof configFileSchema>

/** Reads the config file at `path` as JSON, not yet validated. */
export async function readConfigFile(path: string): Promise<unknown> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    throw new ConfigError(
      `cannot read config file ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`,
    )
  }
  try {
    return JSON.parse(text)
  } catch (error) {
    throw new ConfigError(`config file ${path} is not valid JSON: ${(error as Error).message}`)
  }
}

/** Validates a parsed config file against the schema; every problem names its source and field. */
export function parseConfigFile(input: unknown): ConfigFile {
  const parsed = configFileSchema.safeParse(input)
  if (parsed.success) return parsed.data
  throw new ConfigError(
    `invalid config:\n${parsed.error.issues.map((issue) => `  - ${describePath(input, issue.path)}: ${issue.message}`).join('\n')}`,
  )
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
