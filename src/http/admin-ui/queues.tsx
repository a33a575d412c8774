import { createBullBoard } from '@bull-board/api'
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter'
import { HonoAdapter } from '@bull-board/hono'
import { serveStatic } from '@hono/node-server/serve-static'
import type { Queue } from 'bullmq'
import { Hono } from 'hono'
import { Layout } from './layout.js'

export const QUEUES_PATH = '/admin/queues'

/**
 * The BullMQ dashboard. Without queues (the in-process queue has no Redis to inspect) the path
 * answers 404 with a page that says why, rather than an empty board.
 */
export function queueDashboard(
  queues: readonly Queue[] | undefined,
  user: (c: unknown) => string | undefined,
) {
  if (queues === undefined || queues.length === 0) {
    return new Hono().all('*', (c) =>
      c.html(
        <Layout title="Queues" user={undefined}>
          <h1>Queues</h1>
          <p>
            The queue dashboard needs Redis: this process runs the in-process queue, which has no dashboard.
            Its events are on the <a href="/admin/events">Events</a> page.
          </p>
          <p class="muted">{user(c) ?? ''}</p>
        </Layout>,
        404,
      ),
    )
  }
  const adapter = new HonoAdapter(serveStatic)
  // Before createBullBoard: the board's HTML and asset links are built from it.
  adapter.setBasePath(QUEUES_PATH)
  createBullBoard({
    queues: queues.map((queue) => new BullMQAdapter(queue)),
    serverAdapter: adapter,
    options: { uiConfig: { boardTitle: 'hookledger' } },
  })
  return adapter.registerPlugin()
}
