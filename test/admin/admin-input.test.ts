// Admin search parameters are input like any other: what PostgreSQL cannot take (a NUL) is a 400 with
// a code, never a failing statement answered 500 whose parameters end up in the logs.
import { DrizzleQueryError } from 'drizzle-orm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { captureLogs } from '../support/log-capture.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'

const TOKEN = 'admin-token-for-the-input-tests'
const logs = captureLogs('debug')
let stack: ApiStack
let cookie: string

beforeAll(async () => {
  stack = await createApiStack(testConfig(), { adminToken: TOKEN, logger: logs.logger })
  const login = await stack.app.request('/admin/login', {
    method: 'POST',
    body: new URLSearchParams({ name: 'ana', token: TOKEN }),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://localhost' },
  })
  cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
})
afterAll(async () => {
  await stack.close()
})

describe('admin search parameters', () => {
  it('answer a NUL with 400 invalid_query on the API, naming the field', async () => {
    for (const [path, field] of [
      ['/admin/api/events?source=%00', 'source'],
      ['/admin/api/events?type=%00', 'type'],
      ['/admin/api/events?event_id=evt%00', 'event_id'],
      ['/admin/api/events?payload=data.customer%3Dcus%00', 'payload'],
      ['/admin/api/operations/%00', 'key'],
      ['/admin/api/operations/refund%00-42', 'key'],
    ] as const) {
      const response = await stack.app.request(path, { headers: { authorization: `Bearer ${TOKEN}` } })
      expect(response.status, path).toBe(400)
      expect(await response.json(), path).toEqual({
        error: {
          code: 'invalid_query',
          message: expect.stringMatching(new RegExp(`^${field}: contains a NUL`)),
        },
      })
    }
    // Still a search: a plain key that names nothing is 404, a fine one is found.
    const missing = await stack.app.request('/admin/api/operations/refund-42', {
      headers: { authorization: `Bearer ${TOKEN}` },
    })
    expect(missing.status).toBe(404)
  })

  it('answer a NUL with 400 on the page, saying what is wrong', async () => {
    for (const path of [
      '/admin/events?type=%00',
      '/admin/events?source=%00',
      '/admin/events?event_id=%00',
      '/admin/events?payload=a%3D%00',
      '/admin?source=%00',
    ]) {
      const response = await stack.app.request(path, { headers: { cookie } })
      expect(response.status, path).toBe(400)
      expect(await response.text(), path).toContain('contains a NUL character')
    }
  })

  it('log no error and no query parameter for any of them', () => {
    const entries = logs.entries()
    expect(entries.filter((entry) => Number(entry.level) >= 50)).toEqual([])
    expect(logs.text()).not.toContain('\\u0000')
    expect(logs.text()).not.toContain('params:')
  })

  it('a failed statement is logged by its SQL and cause, never by its parameters', () => {
    const capture = captureLogs('debug')
    const cause = new Error('invalid byte sequence for encoding "UTF8": 0x00')
    const error = new DrizzleQueryError(
      'select * from operations where operation_key = $1',
      ['needle-$&-42'],
      cause,
    )
    capture.logger.error({ err: error }, 'unhandled error')
    const [entry] = capture.entries()
    const logged = entry?.err as { message: string; stack: string; type: string }
    expect(logged.message).toBe(
      'Failed query: select * from operations where operation_key = $1: invalid byte sequence for encoding "UTF8": 0x00',
    )
    expect(logged.type).toBe('DrizzleQueryError')
    expect(capture.text()).toContain('invalid byte sequence')
    expect(capture.text()).not.toContain('needle')
  })
})
