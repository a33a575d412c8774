import { Webhook } from 'standardwebhooks'
import type { AlertChannelConfig } from '../config/alerts.js'
import { classifyStatus, sendHttp } from '../outbound/http-send.js'
import { defineTool, type Tool } from '../outbound/tools.js'

export type AlertCondition =
  | 'event_failed'
  | 'route_disabled'
  | 'circuit_open'
  | 'needs_reconciliation'
  | 'approval_waiting'
  | 'pending_backlog'
  | 'oldest_pending'
  | 'backfill_stuck'
  | 'backpressure'
  | 'events_unqueued'

/** One alert as a person reads it. */
export interface Alert {
  condition: AlertCondition
  /** What it is about (a source, `<source>/<route>`, or `ledger`): one alert per condition and subject per window. */
  subject: string
  summary: string
  /** Where on the admin page to look. */
  link: string
  details?: Record<string, unknown>
}

/**
 * What identifies an alert's operation. Only the identity: the counts in the text change from one
 * check to the next, and the arguments of one operation key must not.
 */
export interface AlertArgs {
  channel: string
  condition: AlertCondition
  subject: string
  windowStart: string
}

const TIMEOUT_MS = 10_000

/** The tool a channel's alerts are sent through: `alert.webhook`, `alert.slack`. */
export function alertToolName(type: AlertChannelConfig['type']): string {
  return `alert.${type}`
}

/**
 * A channel as an idempotent tool of the outbound ledger: one operation per channel, condition,
 * subject and window, so an alert is sent once however many workers notice the condition, and an
 * attempt whose answer was lost is sent again with the same `webhook-id` for the receiver to drop.
 */
export function alertTool(
  channel: AlertChannelConfig,
  alert: Alert,
  windowEnd: Date,
): Tool<AlertArgs, { status: number }> {
  return defineTool<AlertArgs, { status: number }>({
    name: alertToolName(channel.type),
    effect: 'idempotent',
    timeoutMs: TIMEOUT_MS + 1000,
    retry: { attempts: 4, baseDelayMs: 500, maxDelayMs: 5000 },
    async execute(args, ctx) {
      const body = Buffer.from(JSON.stringify(messageFor(channel, alert, args, windowEnd)))
      const headers: Record<string, string> = { 'content-type': 'application/json' }
      if (channel.type === 'webhook') {
        // Standard Webhooks: the id is the operation key, the same for every retry of this alert.
        const timestamp = new Date()
        headers['webhook-id'] = ctx.key
        headers['webhook-timestamp'] = String(Math.floor(timestamp.getTime() / 1000))
        headers['webhook-signature'] = new Webhook(channel.secret).sign(ctx.key, timestamp, body)
      }
      const sent = await sendHttp(new URL(channel.url), {
        method: 'POST',
        headers,
        body,
        timeoutMs: TIMEOUT_MS,
        signals: [ctx.signal],
        guarded: false,
      })
      if (sent.kind !== 'answered') {
        return {
          kind: sent.kind === 'not_sent' ? 'rejection' : 'unknown',
          error: `alert to ${channel.id}: ${sent.error}`,
        }
      }
      const status = sent.answer.status
      // A channel's 4xx is worth another try too: the person the alert is for sees nothing otherwise.
      if (classifyStatus(status) === 'success') return { kind: 'success', result: { status } }
      return { kind: 'unknown', error: `alert to ${channel.id} answered ${status}`, details: { status } }
    },
  })
}

function messageFor(channel: AlertChannelConfig, alert: Alert, args: AlertArgs, windowEnd: Date) {
  if (channel.type === 'slack') {
    return {
      text: `:rotating_light: hookledger: ${slackEscape(alert.summary)}\n<${slackEscape(alert.link).replaceAll('|', '%7C')}|Open the admin page>`,
      // A URL that reached the text as data is not previewed either.
      unfurl_links: false,
      unfurl_media: false,
    }
  }
  return {
    type: `hookledger.alert.${alert.condition}`,
    timestamp: new Date().toISOString(),
    data: {
      condition: alert.condition,
      subject: alert.subject,
      summary: alert.summary,
      link: alert.link,
      window: { start: args.windowStart, end: windowEnd.toISOString() },
      ...(alert.details === undefined ? {} : { details: alert.details }),
    },
  }
}

/**
 * Slack reads `&`, `<` and `>` as markup (api.slack.com/reference/surfaces/formatting#escaping): a
 * summary carries text this server did not write (an agent's operation key, a handler's error), and
 * unescaped, `<https://evil.example|Open the admin page>` would be a disguised link and `<!channel>`
 * would ping everyone. Escaped, it reads as the text it is; only the link written here is markup.
 */
export function slackEscape(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')
}
