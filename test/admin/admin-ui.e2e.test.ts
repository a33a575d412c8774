// The admin page in a real browser against the real service: a person logs in, finds a FAILED event,
// replays it, and decides an approval; the test then reads the ledger to see what those clicks did.
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { and, eq } from 'drizzle-orm'
import { type Browser, chromium, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { approvals, operationAudit, operations } from '../../src/db/outbound-schema.js'
import { eventAttempts, eventReplays, inboundEvents } from '../../src/db/schema.js'
import { defineTool } from '../../src/outbound/tools.js'
import { HandlerError } from '../../src/queue/handler.js'
import { FAST_RELAY, FAST_WORKER, startTestService, type TestService } from '../support/service.js'
import { signedHeaders } from '../support/signing.js'
import { testConfig } from '../support/stack.js'

const TOKEN = 'admin-token-for-the-browser-test'
const OPERATOR = 'e2e-operator'
const CHROMIUM = '/usr/bin/chromium'
// Set to a directory to keep a screenshot of every page (for looking at the layout, not committed).
const SCREENSHOTS = process.env.HOOKLEDGER_SCREENSHOTS_DIR

let running: TestService
let browser: Browser
let inventoryUp = false
/** The keys the notify tool executed with, one entry per execution. */
const notified: string[] = []

// Idempotent: it ran once in the first round; the replay must find its result under the same key.
const notify = defineTool<{ order: number }, string>({
  name: 'notify',
  effect: 'idempotent',
  async execute(_args, ctx) {
    notified.push(ctx.key)
    return { kind: 'success', result: `notified ${notified.length}` }
  },
})

// Irreversible, and its response is always lost: reconciliation finds nothing and asks a human.
const charge = defineTool<{ amount: number }, string>({
  name: 'charge',
  effect: 'irreversible',
  async execute() {
    throw new Error('socket hang up')
  },
  reconcile: async (op) => ({ kind: 'not_found', evidence: { query: op.key, matches: 0 } }),
})

beforeAll(async () => {
  running = await startTestService({
    config: testConfig(
      {
        worker: { ...FAST_WORKER, maxAttempts: 2 },
        relay: FAST_RELAY,
        outbound: { reconcileDelayMs: 0, sweepIntervalMs: 200, leaseMs: 3000, backoffMaxMs: 200 },
      },
      { handler: undefined },
    ),
    env: { ADMIN_TOKEN: TOKEN },
    tools: [charge],
    handlers: {
      acme: async ({ eventType, invoke }) => {
        if (eventType === 'order.charge') {
          await invoke(charge, 'charge', { amount: 4200 })
        } else if (eventType === 'order.paid') {
          await invoke(notify, 'notify', { order: 1 })
          if (!inventoryUp) throw new HandlerError('inventory service unavailable')
        }
      },
    },
  })
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] })
  if (SCREENSHOTS !== undefined) mkdirSync(SCREENSHOTS, { recursive: true })
})
afterAll(async () => {
  await browser?.close()
  await running?.close()
})

async function deliver(id: string, type: string): Promise<string> {
  const body = JSON.stringify({ type, data: { order: 1, items: [{ sku: 'A-1', qty: 2 }] } })
  const response = await fetch(`${running.url}/webhooks/acme`, {
    method: 'POST',
    body,
    headers: signedHeaders(body, { id }),
  })
  expect(response.status).toBe(200)
  return ((await response.json()) as { id: string }).id
}

async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + 20_000
  for (;;) {
    const value = await read()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

async function shot(page: Page, name: string) {
  if (SCREENSHOTS !== undefined)
    await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true })
}

describe('the admin page in Chromium', () => {
  it('logs in, filters to FAILED, replays an event, and decides an approval', {
    timeout: 90_000,
  }, async () => {
    const db = running.database.db
    const failing = await deliver('evt_e2e_fail', 'order.paid')
    await deliver('evt_e2e_ok', 'order.shipped')
    await deliver('evt_e2e_charge', 'order.charge')
    const event = async () => (await db.select().from(inboundEvents).where(eq(inboundEvents.id, failing)))[0]
    await until('the event to end FAILED', event, (row) => row?.status === 'failed')
    const pendingApproval = async () =>
      (await db.select().from(approvals).where(eq(approvals.status, 'pending')))[0]
    const approval = await until('the charge to be escalated', pendingApproval, (row) => row !== undefined)
    if (approval === undefined) throw new Error('no pending approval')
    expect(notified).toEqual(['acme:evt_e2e_fail:notify'])

    const page = await browser.newPage({ viewport: { width: 1360, height: 900 } })
    try {
      await page.goto(`${running.url}/admin/events`)
      expect(page.url()).toContain('/admin/login')
      await shot(page, 'login')
      await page.fill('input[name=name]', OPERATOR)
      await page.fill('input[name=token]', TOKEN)
      await page.getByRole('button', { name: 'Log in' }).click()
      await page.waitForURL('**/admin/events')

      await page.selectOption('select[name=status]', 'failed')
      await page.getByRole('button', { name: 'Filter' }).click()
      await page.waitForURL('**/admin/events?*status=failed*')
      await shot(page, 'events-failed')
      const rows = page.locator('tbody tr')
      expect(await rows.count()).toBe(1)
      await page.getByRole('link', { name: 'evt_e2e_fail' }).click()
      await page.waitForURL(`**/admin/events/${failing}`)
      await shot(page, 'event-failed')
      expect(await page.textContent('body')).toContain('inventory service unavailable')

      inventoryUp = true
      await page.getByRole('button', { name: 'Replay', exact: true }).click()
      await page.waitForURL(`**/admin/events/${failing}`)
      expect(await page.textContent('.notice')).toContain('Replayed: the event is PENDING again')
      await until('the replayed event to be DONE', event, (row) => row?.status === 'done')
      // The notice was for the click; a reload shows the page as it is now, without it.
      await page.reload()
      await shot(page, 'event-replayed')
      expect(await page.locator('.notice').count()).toBe(0)
      expect(await page.textContent('body')).toContain('replay 1')

      // The ledger afterwards: a new round of attempts beside the old one, who replayed it, and the
      // outbound call not made again (its key found the first round's result).
      expect(await event()).toMatchObject({ status: 'done', replays: 1, attempts: 1, lastError: null })
      const attempts = await db
        .select({
          replay: eventAttempts.replay,
          attempt: eventAttempts.attempt,
          outcome: eventAttempts.outcome,
        })
        .from(eventAttempts)
        .where(eq(eventAttempts.eventRowId, failing))
        .orderBy(eventAttempts.id)
      expect(attempts).toEqual([
        { replay: 0, attempt: 1, outcome: 'error' },
        { replay: 0, attempt: 2, outcome: 'error' },
        { replay: 1, attempt: 1, outcome: 'done' },
      ])
      expect(await db.select().from(eventReplays).where(eq(eventReplays.eventRowId, failing))).toEqual([
        expect.objectContaining({ by: OPERATOR, replay: 1, previousAttempts: 2 }),
      ])
      expect(notified).toEqual(['acme:evt_e2e_fail:notify'])

      await page.getByRole('link', { name: 'Approvals' }).click()
      await page.waitForURL('**/admin/approvals')
      await shot(page, 'approvals')
      const card = page.locator('section.card', { hasText: 'acme:evt_e2e_charge:charge' })
      expect(await card.textContent()).toContain('"matches": 0')
      await card.getByRole('button', { name: 'Retry' }).click()
      await page.waitForURL('**/admin/approvals')
      expect(await page.textContent('body')).toContain('Decision recorded.')

      const [decided] = await db.select().from(approvals).where(eq(approvals.id, approval.id))
      expect(decided).toMatchObject({ status: 'decided', decision: 'retry', decidedBy: OPERATOR })
      const [op] = await db.select().from(operations).where(eq(operations.id, approval.operationId))
      expect(op?.status).toBe('retry_approved')
      const audit = await db
        .select()
        .from(operationAudit)
        .where(
          and(
            eq(operationAudit.operationId, approval.operationId),
            eq(operationAudit.event, 'decided_retry'),
          ),
        )
      expect(audit.map((a) => a.actor)).toEqual([`human:${OPERATOR}`])

      await page.getByRole('link', { name: 'Operations' }).click()
      await page.selectOption('select[name=status]', 'all')
      await page.getByRole('button', { name: 'Show' }).click()
      await page.waitForURL('**/admin/operations?status=all')
      await shot(page, 'operations')
      await page.getByRole('link', { name: 'acme:evt_e2e_charge:charge' }).click()
      await page.waitForURL(`**/admin/operations/${approval.operationId}`)
      expect(await page.textContent('body')).toContain('decided_retry')
      await shot(page, 'operation')
      await page.getByRole('link', { name: 'Queues' }).click()
      await page.waitForURL('**/admin/queues**')
      // The board is a JavaScript app: its queue names appear only once its bundle loaded and ran.
      await page.getByText('inbound-events').first().waitFor({ timeout: 15_000 })
      await shot(page, 'queues')
      // The board's own header has the way back, in the menu of its last icon.
      await page.locator('header ul li').last().click()
      await page.getByText('« Admin page').first().waitFor()
      await shot(page, 'queues-menu')
    } finally {
      await page.close()
    }
  })

  it('finds events by id and by payload field, draws the overview, and fits a 420 px screen', {
    timeout: 90_000,
  }, async () => {
    const found = await deliver('evt_e2e_search', 'order.searched')
    await deliver('evt_e2e_other', 'order.shipped')
    const db = running.database.db
    const event = async () => (await db.select().from(inboundEvents).where(eq(inboundEvents.id, found)))[0]
    await until('the searched event to be DONE', event, (row) => row?.status === 'done')
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 } })
    try {
      await logIn(page)
      expect(await page.evaluate('document.compatMode')).toBe('CSS1Compat')
      await page.fill('input[name=event_id]', 'evt_e2e_search')
      await page.getByRole('button', { name: 'Filter' }).click()
      await page.waitForURL('**/admin/events?*event_id=evt_e2e_search*')
      expect(await page.locator('tbody tr').count()).toBe(1)
      await shot(page, 'search-event-id')

      await page.goto(`${running.url}/admin/events`)
      await page.fill('input[name=payload]', 'type = order.searched')
      await page.getByRole('button', { name: 'Filter' }).click()
      await page.waitForURL('**/admin/events?*payload=*')
      expect(await page.locator('tbody tr').count()).toBe(1)
      expect(await page.textContent('tbody')).toContain('evt_e2e_search')
      await page.fill('input[name=payload]', 'data.items.0.sku = A-1')
      await page.getByRole('button', { name: 'Filter' }).click()
      await page.waitForURL('**/admin/events?*payload=data.items*')
      // Every delivery of this file carries that item.
      expect(await page.locator('tbody tr').count()).toBeGreaterThanOrEqual(2)
      await shot(page, 'search-payload')

      await page.getByRole('link', { name: 'Overview' }).click()
      await page.waitForURL(/\/admin$/)
      expect(await page.locator('svg.chart').count()).toBeGreaterThanOrEqual(2)
      expect(await page.textContent('body')).toContain('Latency p99')
      await shot(page, 'overview')
      await page.getByRole('link', { name: '30 s' }).click()
      await page.waitForURL('**/admin?refresh=30')
      expect(await page.locator('meta[http-equiv=refresh]').getAttribute('content')).toBe('30')
      await page.getByRole('link', { name: 'Last day' }).click()
      await page.waitForURL('**/admin?window=day&refresh=30')
      await shot(page, 'overview-day')

      // A phone: the header spans the screen and nothing makes the page itself scroll sideways.
      await page.setViewportSize({ width: 420, height: 900 })
      for (const [path, name] of [
        ['/admin', 'narrow-overview'],
        ['/admin/events', 'narrow-events'],
        [`/admin/events/${found}`, 'narrow-event'],
        ['/admin/approvals', 'narrow-approvals'],
      ] as const) {
        await page.goto(`${running.url}${path}`)
        // A string: the test's TypeScript has no DOM types; this runs in the page.
        const widths = await page.evaluate(`({
          page: document.documentElement.scrollWidth,
          header: document.querySelector('header.top').getBoundingClientRect().width,
        })`)
        expect(widths, path).toEqual({ page: 420, header: 420 })
        await shot(page, name)
      }
    } finally {
      await page.close()
    }
  })
})

async function logIn(page: Page) {
  await page.goto(`${running.url}/admin/login`)
  await page.fill('input[name=name]', OPERATOR)
  await page.fill('input[name=token]', TOKEN)
  await page.getByRole('button', { name: 'Log in' }).click()
  // Without a `next`, a login lands on the overview; the callers start from the event list.
  await page.waitForURL((url) => url.pathname === '/admin')
  await page.goto(`${running.url}/admin/events`)
}
