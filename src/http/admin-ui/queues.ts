import { createBullBoard } from '@bull-board/api'
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter'
import { HonoAdapter } from '@bull-board/hono'
import { serveStatic } from '@hono/node-server/serve-static'
import type { Queue } from 'bullmq'

export const QUEUES_PATH = '/admin/queues'

/**
 * The BullMQ dashboard's routes (UI, its JSON API and static assets), to mount at QUEUES_PATH
 * behind the admin session. Undefined without queues: the in-process queue has no Redis to show.
 */
export function queueDashboard(queues: readonly Queue[] | undefined) {
  if (queues === undefined || queues.length === 0) return undefined
  const adapter = new HonoAdapter(serveStatic)
  // Before createBullBoard: the board's HTML and asset links are built from it.
  adapter.setBasePath(QUEUES_PATH)
  createBullBoard({
    queues: queues.map((queue) => new BullMQAdapter(queue)),
    serverAdapter: adapter,
    // The board is its own app with its own header: this link is its way back to the admin page.
    options: {
      uiConfig: { boardTitle: 'hookledger', miscLinks: [{ text: '« Admin page', url: '/admin' }] },
    },
  })
  return adapter.registerPlugin()
}
