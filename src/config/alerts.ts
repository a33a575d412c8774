import { Webhook } from 'standardwebhooks'
import { z } from 'zod'
import { ConfigError } from './errors.js'
import { uniqueIds } from './routes.js'
import { type Lookup, resolveSecretReference } from './secrets.js'

const CHANNEL_ID = /^[a-z0-9][a-z0-9_-]{0,62}$/
const url = z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })

const channelSchema = z.discriminatedUnion('type', [
  z
    .object({
      type: z.literal('webhook'),
      id: z.string().regex(CHANNEL_ID, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
      url,
      /** A Standard Webhooks secret (`whsec_…`, or `env:NAME`): the receiver verifies each alert with it. */
      secret: z.string().min(1),
    })
    .strict(),
  z
    .object({
      type: z.literal('slack'),
      id: z.string().regex(CHANNEL_ID, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
      /** A Slack incoming-webhook URL (or any service that takes `{"text": …}`); `env:NAME` keeps it out of the file. */
      url: z.union([url, z.string().regex(/^env:[A-Za-z_][A-Za-z0-9_]*$/)]),
    })
    .strict(),
])

export type AlertChannelConfig = z.infer<typeof channelSchema>

/** A threshold, or null to turn the condition off. */
const threshold = (fallback: number) => z.number().int().min(0).nullable().default(fallback)

export const alertsSchema = z
  .object({
    /** The admin page's public base URL (`https://hooks.example.com`), so an alert links to it. */
    adminUrl: url.optional(),
    channels: z.array(channelSchema).default([]).superRefine(uniqueIds('channel')),
    /** One alert per condition and subject within each window of this length. */
    windowMs: z
      .number()
      .int()
      .min(1000)
      .default(60 * 60 * 1000),
    /** How often the worker looks at the ledger for the conditions below. */
    checkIntervalMs: z.number().int().min(100).default(30_000),
    conditions: z
      .object({
        /** Events of a source that ended FAILED within the window. */
        eventFailed: z.boolean().default(true),
        /** A route a 410 Gone disabled. */
        routeDisabled: z.boolean().default(true),
        /** A destination's circuit breaker is open (a route's, or a source's forward handler's). */
        circuitOpen: z.boolean().default(true),
        /** Operations in needs_reconciliation for longer than this. */
        needsReconciliationMs: threshold(0),
        /** Approvals nobody decided for longer than this. */
        approvalWaitingMs: threshold(60 * 60 * 1000),
        /** More PENDING events than this (the backlog the workers and the relay have not cleared). */
        pendingBacklog: threshold(10_000),
        /** The oldest PENDING event has waited longer than this. */
        oldestPendingMs: threshold(15 * 60 * 1000),
        /**
         * A source's last backfill pass within the window stopped on an error its next pass will meet
         * again (a provider list going round in circles, a page over maxResponseBytes).
         */
        backfillStuck: z.boolean().default(true),
        /**
         * The unfinished events reached server.backpressure.maxBacklog: new deliveries and agents'
         * claims are being refused with 429 (off when that bound is not set).
         */
        backpressure: z.boolean().default(true),
        /** More committed events than this that Redis has not taken a job for (down, or refusing writes). */
        unqueuedEvents: threshold(100),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .prefault({})

export type AlertsConfig = z.infer<typeof alertsSchema>

/** A channel with its `env:` references looked up and its signing secret checked (ConfigError if not). */
export function resolveAlertChannel(channel: AlertChannelConfig, lookup: Lookup): AlertChannelConfig {
  if (channel.type === 'slack') {
    const url = resolveSecretReference(channel.url, 'url', lookup)
    if (!/^https?:\/\//.test(url)) throw new ConfigError('url: must be an http:// or https:// URL')
    return { ...channel, url }
  }
  const secret = resolveSecretReference(channel.secret, 'secret', lookup)
  try {
    new Webhook(secret)
  } catch {
    throw new ConfigError('secret: must be a Standard Webhooks secret (whsec_ and base64)')
  }
  return { ...channel, secret }
}
