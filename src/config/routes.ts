import { z } from 'zod'
import { jsonPointerSchema } from './json-pointer.js'
import type { SecretResolver } from './secrets.js'

const ROUTE_ID = /^[a-z0-9][a-z0-9_-]{0,62}$/

/**
 * An ordering key: a JSON pointer through the body's objects (`/data/object/customer`). Events
 * whose value there is the same are processed one at a time, in the order they were received.
 */
export const orderingKeySchema = jsonPointerSchema('/data/object/customer', { inside: true })

const conditionSchema = z
  .object({
    /** A JSON pointer into the event's body (`/data/object/livemode`). */
    path: jsonPointerSchema('/data/object/livemode'),
    /** Matches when the value there equals this JSON value. */
    equals: z.json().optional(),
    /** Matches when the value there is one of these. */
    in: z.array(z.json()).min(1).optional(),
    /** Matches when the pointer leads to a value (true) or to none (false). */
    exists: z.boolean().optional(),
  })
  .strict()
  .superRefine((condition, ctx) => {
    const tests = ['equals', 'in', 'exists'].filter((name) => Object.hasOwn(condition, name))
    if (tests.length !== 1) {
      ctx.addIssue({
        code: 'custom',
        message: `needs exactly one of "equals", "in" or "exists" (has ${tests.length === 0 ? 'none' : tests.join(', ')})`,
      })
    }
  })

export type RouteCondition = z.infer<typeof conditionSchema>

const filterSchema = z
  .object({
    /** Event type globs (`invoice.*`, `*.created`): the route matches when any of them does. */
    types: z
      .array(
        z
          .string()
          .min(1)
          .max(200)
          .regex(/^[^\s]+$/, 'must not contain spaces'),
      )
      .min(1)
      .optional(),
    /** Conditions on the parsed body; the route matches when all of them hold. */
    where: z.array(conditionSchema).min(1).optional(),
  })
  .strict()

export type RouteFilter = z.infer<typeof filterSchema>

const destinationLimitsSchema = {
  /** Deliveries per second to this destination, across every worker process. */
  rateLimit: z
    .object({ perSecond: z.number().int().min(1).max(100_000) })
    .strict()
    .optional(),
  /** Deliveries in flight to this destination at once, across every worker process. */
  concurrency: z.number().int().min(1).max(10_000).optional(),
  /** Always on: after `failureThreshold` consecutive failures, deliveries wait `coolDownMs`, then one probe goes. */
  circuitBreaker: z
    .object({
      /** Consecutive failures (timeouts, 5xx, connection errors) that open the circuit. */
      failureThreshold: z.number().int().min(1).max(1000).default(5),
      /** How long an open circuit holds deliveries back before one probe is let through. */
      coolDownMs: z.number().int().min(100).max(3_600_000).default(30_000),
    })
    .strict()
    .prefault({}),
}

export const routeForwardSchema = z
  .object({
    /** Where the route's events are sent (http or https). */
    url: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }),
    /** Sent with every delivery, after the provider's own headers (so these win). */
    headers: z.record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/), z.string()).optional(),
    /** The time limit of one send; no answer by then is a failed attempt. */
    timeoutMs: z.number().int().min(100).max(120_000).default(10_000),
    ...destinationLimitsSchema,
  })
  .strict()

export type RouteForward = z.infer<typeof routeForwardSchema>

export const routeSchema = z
  .object({
    /** The route's name, unique within its source; part of its operation key and Idempotency-Key. */
    id: z.string().regex(ROUTE_ID, 'must be 1-63 lower-case letters, digits, "-" or "_"'),
    /** Absent: every event of the source. */
    /** Which events the route takes (event types and body conditions); none: every event. */
    filter: filterSchema.optional(),
    /** Send the event to an HTTP destination (this or `handler`). */
    forward: routeForwardSchema.optional(),
    /** The name of a handler registered in code (`handlers: { [name]: fn }`). */
    handler: z.string().min(1).max(100).optional(),
    /** Deliveries to this route of events with the same value here go one at a time, in received order. */
    orderingKey: orderingKeySchema.optional(),
  })
  .strict()
  .superRefine((route, ctx) => {
    if ((route.forward === undefined) === (route.handler === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'needs exactly one of "forward" or "handler"' })
    }
  })

export type RouteConfig = z.infer<typeof routeSchema>

export const routesSchema = z.array(routeSchema).min(1).superRefine(uniqueIds('route'))

/** Route forward headers may carry credentials as `env:NAME`, like every other secret in the file. */
export function resolveRouteHeaders(
  routes: readonly RouteConfig[],
  resolveSecret: SecretResolver,
): RouteConfig[] {
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

/** A list's refinement: every entry's `id` differs, or the second of two is named. */
export function uniqueIds(what: string) {
  return (entries: ReadonlyArray<{ id: string }>, ctx: z.RefinementCtx) => {
    const seen = new Set<string>()
    entries.forEach((entry, index) => {
      if (seen.has(entry.id)) {
        ctx.addIssue({
          code: 'custom',
          path: [index, 'id'],
          message: `${what} id '${entry.id}' is used twice`,
        })
      }
      seen.add(entry.id)
    })
  }
}
