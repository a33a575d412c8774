// The baseline: the same Hono + node-server stack, a route that reads the body and answers 200.
import { serve } from '@hono/node-server'
import { Hono } from 'hono'

const app = new Hono()
  .get('/healthz', (c) => c.json({ status: 'ok' }))
  .post('/webhooks/:source', async (c) => {
    await c.req.arrayBuffer()
    return c.json({ status: 'accepted' }, 200)
  })
const port = Number(process.env.PORT ?? 0)
const server = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, (info) => {
  process.stdout.write(`hookledger listening on ${info.port}\n`)
})
process.once('SIGTERM', () => server.close(() => process.exit(0)))
