import type { EffectClass } from '../db/outbound-schema.js'
import { isJsonPointer, parsePointer } from '../json-pointer.js'
import { classifyStatus, sendHttp } from './http-send.js'
import { checkDestination, DestinationRefusedError, isAllowListed } from './ssrf.js'
import {
  defineTool,
  type ReconcileResult,
  type RetryPolicy,
  type Tool,
  type ToolContext,
  type UndoResult,
} from './tools.js'

export interface HttpToolArgs {
  /** A destination chosen at run time (by an agent): checked against SSRF unless allow-listed. */
  url?: string
  /** Sent as JSON. */
  body?: unknown
  headers?: Record<string, string>
}

export interface HttpToolResult {
  status: number
  /** The response body as text, up to 64 KiB. */
  body: string
}

export interface HttpToolOptions {
  name?: string
  /** A URL written by the operator (code or config): trusted, never SSRF-checked. */
  url?: string
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  effect: EffectClass
  headers?: Record<string, string>
  /** Hosts argument URLs may reach although they are not public (besides the ledger's `allowHosts`). */
  allowHosts?: readonly string[]
  timeoutMs?: number
  retry?: Partial<RetryPolicy>
  undo?: (args: HttpToolArgs, ctx: ToolContext & { undoRef: unknown }) => Promise<UndoResult>
  reconcile?: Tool<HttpToolArgs, HttpToolResult>['reconcile']
  /**
   * Where to put the operation key so the provider echoes it back in its webhooks, which evidence
   * rules then read: `body`, a JSON pointer into the JSON body (`/metadata/hookledger_key`: Stripe
   * copies metadata onto the payment intent and its events); `header`, a request header.
   */
  operationKeyAt?: { body?: string; header?: string }
}

const EXCERPT = 64 * 1024

/**
 * A tool that makes one HTTP request per attempt with `Idempotency-Key: <key>`, follows no
 * redirects, and classifies the answer (see `classifyStatus`). Destinations from arguments that
 * resolve to loopback, private, link-local or metadata addresses are refused before anything is
 * sent, which is a definite rejection.
 */
export function httpTool(options: HttpToolOptions): Tool<HttpToolArgs, HttpToolResult> {
  const timeoutMs = options.timeoutMs ?? 10_000
  const keyPointer = options.operationKeyAt?.body
  if (keyPointer !== undefined && (keyPointer === '' || !isJsonPointer(keyPointer))) {
    throw new TypeError(`operationKeyAt.body must be a JSON pointer such as /metadata/hookledger_key`)
  }
  const keyHeader = options.operationKeyAt?.header
  return defineTool<HttpToolArgs, HttpToolResult>({
    name: options.name ?? `http:${options.method}:${options.url ?? 'dynamic'}`,
    effect: options.effect,
    timeoutMs: timeoutMs + 1000,
    ...(options.retry === undefined ? {} : { retry: options.retry }),
    ...(options.undo === undefined ? {} : { undo: options.undo }),
    ...(options.reconcile === undefined ? {} : { reconcile: options.reconcile }),
    async execute(args, ctx) {
      const target = args.url ?? options.url
      if (target === undefined)
        return { kind: 'rejection', error: 'no url: give one to httpTool or in the arguments' }
      let url: URL
      try {
        url = new URL(target)
      } catch {
        return { kind: 'rejection', error: `not a URL: ${target}` }
      }
      // Only a URL that arrived in the arguments is checked: the operator's own are allow-listed.
      const guarded =
        args.url !== undefined && !isAllowListed(url, [...(options.allowHosts ?? []), ...ctx.allowHosts])
      if (guarded) {
        try {
          checkDestination(url)
        } catch (error) {
          if (error instanceof DestinationRefusedError)
            return { kind: 'rejection', error: `refused: ${error.message}` }
          throw error
        }
      }
      const content =
        keyPointer === undefined ? args.body : withKeyAt(args.body, keyPointer, ctx.operationKey)
      if (content === CANNOT_PLACE) {
        return {
          kind: 'rejection',
          error: `the body has no object at ${keyPointer} to hold the operation key`,
        }
      }
      const body = content === undefined ? undefined : Buffer.from(JSON.stringify(content))
      const sent = await sendHttp(url, {
        method: options.method,
        headers: {
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...options.headers,
          ...args.headers,
          ...(keyHeader === undefined ? {} : { [keyHeader.toLowerCase()]: ctx.operationKey }),
          'idempotency-key': ctx.key,
        },
        body,
        timeoutMs,
        signals: [ctx.signal],
        guarded,
      })
      switch (sent.kind) {
        case 'not_sent':
          return { kind: 'rejection', error: `refused: ${sent.error}` }
        case 'no_answer':
          return { kind: 'unknown', error: sent.error }
        case 'answered': {
          const result = {
            status: sent.answer.status,
            body: sent.answer.body.toString('utf8').slice(0, EXCERPT),
          }
          const kind = classifyStatus(result.status)
          if (kind === 'success') return { kind, result }
          return {
            kind,
            error: `${options.method} ${url.origin}${url.pathname} answered ${result.status}`,
            details: result,
          }
        }
        default:
          return sent satisfies never
      }
    },
  })
}

export type { ReconcileResult }

const CANNOT_PLACE = Symbol('cannot place the key')

/**
 * A copy of `body` with `key` at `pointer`, objects made on the way (`/metadata/hookledger_key` on a
 * body without metadata). The arguments stay as hashed: the key is part of the operation, not of them.
 */
function withKeyAt(body: unknown, pointer: string, key: string): unknown {
  const root: unknown = body === undefined ? {} : structuredClone(body)
  const tokens = parsePointer(pointer)
  let current = root
  for (const [index, token] of tokens.entries()) {
    if (!isPlainObject(current)) return CANNOT_PLACE
    if (index === tokens.length - 1) {
      current[token] = key
    } else {
      current[token] ??= {}
      current = current[token]
    }
  }
  return root
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
