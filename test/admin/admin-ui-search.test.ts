// Finding an event on the admin page and through /admin/api/events: by its event id (in any
// source) and by a field of its JSON body, served by the GIN index of inbound_event_payloads.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimEvents } from '../../src/db/claims.js'
import { eventFilterConditions } from '../../src/db/event-queries.js'
import { inboundEvents } from '../../src/db/schema.js'
import { addPastPeriods } from '../support/periods.js'
import { type ApiStack, createApiStack, testConfig } from '../support/stack.js'
import { seedEvent } from './seed.js'

const TOKEN = 'admin-token-for-the-search-tests'
let stack: ApiStack
let cookie: string

beforeAll(async () => {
  stack = await createApiStack(testConfig(), { adminToken: TOKEN })
  const login = await stack.app.request('/admin/login', {
    method: 'POST',
    body: new URLSearchParams({ name: 'ana', token: TOKEN }),
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://localhost' },
  })
  cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? ''
  const body = (customer: string, extra: object = {}) =>
    JSON.stringify({ type: 'invoice.paid', data: { object: { customer, amount: 42, ...extra } } })
  await seedEvent(stack.database.db, { source: 'stripe', eventId: 'evt_A', body: body('cus_123') })
  await seedEvent(stack.database.db, { source: 'stripe', eventId: 'evt_B', body: body('cus_456') })
  await seedEvent(stack.database.db, {
    source: 'stripe',
    eventId: 'evt_C',
    body: body('cus_123', { amount: '42', lines: [{ sku: 'A-1' }, { sku: 'B-2' }] }),
  })
  // The same id in another source, and an id that only starts like it.
  await seedEvent(stack.database.db, { source: 'github', eventId: 'evt_A', body: '{"action":"opened"}' })
  await seedEvent(stack.database.db, { source: 'github', eventId: 'evt_AB', body: '{"action":"closed"}' })
  // A body that is not JSON is received and stored like any other; it just never matches a field.
  await seedEvent(stack.database.db, { source: 'forms', eventId: 'evt_form', body: 'customer=cus_123&a=%ff' })
  await seedEvent(stack.database.db, { source: 'forms', eventId: 'evt_bin', body: '\u0000\u00ff{' })
})
afterAll(async () => {
  await stack.close()
})

async function pageIds(query: string): Promise<{ status: number; ids: string[]; html: string }> {
  const response = await stack.app.request(`/admin/events?${query}`, { headers: { cookie } })
  const html = await response.text()
  return { status: response.status, ids: [...html.matchAll(/>(evt_\w+)</g)].map((m) => m[1] ?? ''), html }
}

async function api(query: string) {
  const response = await stack.app.request(`/admin/api/events?${query}`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

const apiIds = async (query: string) => {
  const { status, body } = await api(query)
  expect(status, query).toBe(200)
  return (body.events as Array<{ source: string; eventId: string }>)
    .map((e) => `${e.source}/${e.eventId}`)
    .sort()
}

describe('search by event id', () => {
  it('finds the exact id in every source, and no id that merely starts with it', async () => {
    expect(await apiIds('event_id=evt_A')).toEqual(['github/evt_A', 'stripe/evt_A'])
    expect(await apiIds('event_id=evt_A&source=github')).toEqual(['github/evt_A'])
    expect(await apiIds('event_id=evt_nothing')).toEqual([])
    const { status, ids, html } = await pageIds('event_id=evt_A')
    expect(status).toBe(200)
    expect(ids.sort()).toEqual(['evt_A', 'evt_A'])
    expect(html).toContain('<input name="event_id" value="evt_A"')
  })
})

describe('search by a payload field', () => {
  it('matches a JSON path equal to a value: strings, numbers by type, array indexes', async () => {
    const query = (payload: string) => `payload=${encodeURIComponent(payload)}`
    expect(await apiIds(query('data.object.customer = cus_123'))).toEqual(['stripe/evt_A', 'stripe/evt_C'])
    expect(await apiIds(query('data.object.customer=cus_456'))).toEqual(['stripe/evt_B'])
    // 42 is the number; "42" the string.
    expect(await apiIds(query('data.object.amount = 42'))).toEqual(['stripe/evt_A', 'stripe/evt_B'])
    expect(await apiIds(query('data.object.amount = "42"'))).toEqual(['stripe/evt_C'])
    // An index picks that element only; containment alone would accept any element.
    expect(await apiIds(query('data.object.lines.1.sku = B-2'))).toEqual(['stripe/evt_C'])
    expect(await apiIds(query('data.object.lines.0.sku = B-2'))).toEqual([])
    // A value at another path is not a match, nor is a prefix of the path.
    expect(await apiIds(query('customer = cus_123'))).toEqual([])
    expect(await apiIds(query('data.object = cus_123'))).toEqual([])
    // Combined with the other filters.
    expect(await apiIds(`${query('data.object.customer = cus_123')}&event_id=evt_C`)).toEqual([
      'stripe/evt_C',
    ])
    const { ids, html } = await pageIds(query('data.object.customer = cus_123'))
    expect(ids.sort()).toEqual(['evt_A', 'evt_C'])
    expect(html).toContain('<input name="payload" value="data.object.customer = cus_123"')
  })

  it('finds an event as the receive path claimed it, and none for a body that is not JSON', async () => {
    const claimed = (eventId: string, body: string) => ({
      source: 'shop',
      eventId,
      eventType: null,
      payloadHash: eventId.padEnd(64, '0'),
      body: Buffer.from(body),
      headers: {},
    })
    await claimEvents(stack.database.sql, [
      claimed('evt_claimed', '{"data":{"object":{"customer":"cus_claimed"}}}'),
      claimed('evt_claimed_form', 'data.object.customer=cus_claimed'),
    ])
    expect(await apiIds('payload=data.object.customer%3Dcus_claimed')).toEqual(['shop/evt_claimed'])
    // Both bodies are stored as received; the form-encoded one has no entry in the JSON index.
    const payloads = await stack.database.sql<{ json: boolean }[]>`
      select hookledger_body_json(p.body) is not null as json
      from inbound_event_payloads p join inbound_events e on e.id = p.event_row_id
      where e.source = 'shop' order by e.event_id`
    expect(payloads.map((row) => row.json)).toEqual([true, false])
  })

  it('refuses a search it cannot read, with a specific code, on the page and the API', async () => {
    for (const bad of ['no-equals-sign', '= cus_1', 'data..customer = x', `${'a.'.repeat(16)}a = 1`]) {
      const { status, body } = await api(`payload=${encodeURIComponent(bad)}`)
      expect(status, bad).toBe(400)
      expect(body).toEqual({
        error: { code: 'invalid_query', message: expect.stringContaining('payload: write a JSON path') },
      })
      const page = await pageIds(`payload=${encodeURIComponent(bad)}`)
      expect(page.status).toBe(400)
      expect(page.html).toContain('Bad filter: payload')
    }
    expect((await api('limit=0')).status).toBe(400)
  })

  it('is served by the GIN index on the parsed body', async () => {
    // The planner prefers a sequential scan on a tiny table; with it off, the index must be usable.
    const query = stack.database.db
      .select({ id: inboundEvents.id })
      .from(inboundEvents)
      .where(eventFilterConditions({ payload: { path: ['data', 'object', 'customer'], value: 'cus_123' } }))
      .toSQL()
    const plan = await stack.database.sql.begin(async (tx) => {
      await tx`set local enable_seqscan = off`
      return tx.unsafe(`explain ${query.sql}`, query.params as never[])
    })
    // Each period's copy of the index: inbound_event_payloads_<yyyymmdd>_body_idx.
    expect(plan.map((row) => Object.values(row)[0]).join('\n')).toMatch(
      /Index Scan on inbound_event_payloads_\d{8}_\w*body\w*_idx/,
    )
  })
})

describe('a payload search over more events than it reads newest first', () => {
  // 2,100 events of one kind, newest last, and one of another kind older than all of them: the
  // search reads the newest 2,000 (PAYLOAD_WALK_ROWS) one by one, then asks the body index.
  beforeAll(async () => {
    await addPastPeriods(stack.database.sql, { since: '1 hour' })
    await stack.database.sql`
      with seeded as (
        select n, now() - interval '1 hour' + n * interval '1 millisecond' as at,
               convert_to(json_build_object('kind', case when n = 0 then 'deep' else 'broad' end, 'n', n)::text,
                          'UTF8') as body
        from generate_series(0, 2100) as n),
      inserted as (
        insert into inbound_events (id, source, event_id, payload_hash, headers, status, received_at)
        select hookledger_uuid_v7(at), 'bulk', 'evt_bulk_' || n, md5(n::text), '{}', 'done', at from seeded
        returning id, event_id)
      insert into inbound_event_payloads (event_row_id, body)
      select inserted.id, seeded.body from inserted join seeded on inserted.event_id = 'evt_bulk_' || seeded.n`
  })

  it('pages through every match newest first, each once, across the rows it reads one by one', async () => {
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const { status, body } = await api(
        `source=bulk&payload=${encodeURIComponent('kind = broad')}&limit=500${cursor === null ? '' : `&after=${cursor}`}`,
      )
      expect(status).toBe(200)
      seen.push(...(body.events as Array<{ eventId: string }>).map((event) => event.eventId))
      cursor = body.next as string | null
    } while (cursor !== null)
    expect(seen).toEqual(Array.from({ length: 2100 }, (_, i) => `evt_bulk_${2100 - i}`))
  })

  it('finds a match older than the rows it reads one by one, through the body index', async () => {
    expect(await apiIds(`source=bulk&payload=${encodeURIComponent('kind = deep')}`)).toEqual([
      'bulk/evt_bulk_0',
    ])
    expect(await apiIds(`payload=${encodeURIComponent('kind = deep')}&limit=1`)).toEqual(['bulk/evt_bulk_0'])
  })
})
