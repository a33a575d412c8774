import { Hono } from 'hono'
import { z } from 'zod'
import { assertNever } from '../../assert.js'
import { MAX_KEY_LENGTH } from '../../config/operation-keys.js'
import type { Database } from '../../db/client.js'
import { listEvents } from '../../db/event-queries.js'
import {
  findOperation,
  listApprovals,
  listAttempts,
  listAudit,
  listOperations,
} from '../../db/operation-queries.js'
import { operationStatus } from '../../db/outbound-schema.js'
import type { Logger } from '../../logger.js'
import { decide, showApproval } from '../../outbound/approvals.js'
import type { Enqueuer } from '../../queue/enqueuer.js'
import { encodeCursor, eventsQuery, filterOf, storable } from '../admin-ui/filters.js'
import { ApiError } from '../errors.js'
import { bearerAuth } from '../middleware/bearer.js'
import { parseJsonBody } from '../validate.js'
import { adminReplayRoutes } from './admin-replay.js'

const decisionBody = z.object({
  decision: z.enum(['retry', 'record_success', 'abandon']),
  by: z.string().min(1).max(200),
  payloadHash: z
    .string()
    .regex(/^[0-9a-f]{64}$/, 'must be a sha256 hex digest')
    .optional(),
  evidence: z.json().optional(),
  result: z.json().optional(),
  downstreamId: z.string().max(500).optional(),
  note: z.string().max(2000).optional(),
})
const listQuery = z.object({
  // 'all' as on the admin page (/admin/operations?status=all): the same link works on both.
  status: z
    .enum([...operationStatus.enumValues, 'all'])
    .optional()
    .transform((status) => (status === 'all' ? undefined : status)),
  limit: z.coerce.number().int().min(1).max(500).optional(),
})
const approvalQuery = z.object({
  status: z.enum(['pending', 'decided']).optional(),
  limit: z.coerce.number().int().min(1).max(500).optional(),
})
const eventsLimit = z.object({ limit: z.coerce.number().int().min(1).max(500).default(50) })
const uuid = z.uuid()
const operationKey = z.object({ key: z.string().min(1).max(MAX_KEY_LENGTH).superRefine(storable) })

/** A query string or path parameter read with `schema`: 400 `invalid_query` naming each bad field. */
function query<T extends z.ZodType>(schema: T, input: Record<string, string>): z.infer<T> {
  const parsed = schema.safeParse(input)
  if (!parsed.success) {
    throw new ApiError(
      400,
      'invalid_query',
      parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
    )
  }
  return parsed.data
}

/** `/admin/api`: events (filter, search, replay), operations by status, approvals, decisions. Behind ADMIN_TOKEN (unset: refused). */
export function adminRoutes(deps: {
  db: Database
  adminToken: string | undefined
  enqueuer: Enqueuer
  logger: Logger
}) {
  return (
    new Hono()
      .use('*', bearerAuth(deps.adminToken, 'admin API', 'ADMIN_TOKEN'))
      // Replay by filter (src/db/bulk-replay.ts), the admin page's bulk action and `hookledger events replay` too.
      .route('/', adminReplayRoutes(deps))
      // The same filters as the admin page's event list (and the same search): one parser for both.
      .get('/events', async (c) => {
        const filter = query(eventsQuery, c.req.query())
        const { limit } = query(eventsLimit, c.req.query())
        const page = await listEvents(deps.db, filterOf(filter), { after: filter.after, limit })
        return c.json({ events: page.events, next: page.next === undefined ? null : encodeCursor(page.next) })
      })
      .get('/operations', async (c) => {
        const filter = query(listQuery, c.req.query())
        return c.json({ operations: await listOperations(deps.db, filter) })
      })
      .get('/operations/:key', async (c) => {
        const { key } = query(operationKey, c.req.param())
        const op = await findOperation(deps.db, key)
        if (op === undefined) throw new ApiError(404, 'operation_not_found', 'no operation has that key')
        return c.json({
          operation: op,
          attempts: await listAttempts(deps.db, op.id),
          audit: await listAudit(deps.db, op.id),
        })
      })
      .get('/approvals', async (c) => {
        const filter = query(approvalQuery, c.req.query())
        return c.json({ approvals: await listApprovals(deps.db, filter) })
      })
      .get('/approvals/:id', async (c) => {
        const id = c.req.param('id')
        const view = uuid.safeParse(id).success ? await showApproval(deps.db, id) : undefined
        if (view === undefined) throw new ApiError(404, 'approval_not_found', 'no approval has that id')
        return c.json(view)
      })
      .post('/approvals/:id/decision', async (c) => {
        const id = c.req.param('id')
        if (!uuid.safeParse(id).success)
          throw new ApiError(404, 'approval_not_found', 'no approval has that id')
        const body = await parseJsonBody(c, decisionBody)
        const outcome = await decide(deps.db, { approvalId: id, ...body })
        switch (outcome.kind) {
          case 'decided':
            return c.json(outcome)
          case 'not_found':
            throw new ApiError(404, 'approval_not_found', 'no approval has that id')
          case 'already_decided':
            throw new ApiError(
              409,
              'already_decided',
              `already decided (${outcome.decision ?? 'none'} by ${outcome.by ?? 'nobody'})`,
            )
          case 'payload_mismatch':
            throw new ApiError(
              409,
              'payload_mismatch',
              `a retry is bound to the arguments shown; their payload hash is ${outcome.expected}`,
            )
          case 'invalid':
            throw new ApiError(400, 'invalid_request', outcome.message)
          default:
            return assertNever(outcome)
        }
      })
  )
}
