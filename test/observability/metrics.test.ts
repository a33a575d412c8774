import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { createMetrics, SCRAPE_CACHE_MS } from '../../src/metrics.js'
import { defineTool } from '../../src/outbound/tools.js'
import { startTestService } from '../support/service.js'
import { testConfig } from '../support/stack.js'

describe('metric names', () => {
  it('carry the project prefix once, in front of the default process and nodejs names', async () => {
    const names = (await createMetrics().registry.getMetricsAsJSON()).map((metric) => metric.name)
    expect(names).toContain('hookledger_process_cpu_user_seconds_total')
    expect(names).toContain('hookledger_process_resident_memory_bytes')
    expect(names).toContain('hookledger_nodejs_eventloop_lag_seconds')
    expect(names).toContain('hookledger_deliveries_total')
    for (const name of names) {
      expect(name).toMatch(/^hookledger_/)
      expect(name).not.toMatch(/process_process|hookledger_process_nodejs/)
    }
  })
})

describe('metric labels', () => {
  it('take tool names from the configuration only: 3,000 names an agent made up are one series', async () => {
    const lost = (name: string) =>
      defineTool<{ n: number }, string>({
        name,
        effect: 'irreversible',
        execute: async () => {
          throw new Error('socket hang up')
        },
      })
    const charge = lost('charge')
    const running = await startTestService({
      config: testConfig({
        // A long reconcile delay: the operations stay open (needs_reconciliation) while /metrics is read.
        outbound: { reconcileDelayMs: 600_000, tools: { 'agent.refund': { maxAttempts: 2 } } },
      }),
      tools: [charge],
    })
    try {
      const { outbound } = running.service
      const scrape = async () => {
        // The registry's text is reused for a second: wait it out so the scrape is fresh.
        await new Promise((resolve) => setTimeout(resolve, SCRAPE_CACHE_MS + 100))
        return (await fetch(`${running.url}/metrics`)).text()
      }
      const before = await scrape()
      const names = Array.from({ length: 3000 }, () => `agent_tool_${randomBytes(12).toString('hex')}`)
      const started = Date.now()
      for (let next = 0; next < names.length; next += 25) {
        const batch = names.slice(next, next + 25)
        const outcomes = await Promise.all(
          batch.map((name, i) => outbound.invoke(lost(name), { key: `run-1:${next + i}`, args: { n: i } })),
        )
        for (const outcome of outcomes) expect(outcome.kind).toBe('needs_reconciliation')
        expect(Date.now() - started, 'the 3,000 claims took too long').toBeLessThan(120_000)
      }
      for (const [key, tool] of [
        ['run-1:charge', charge],
        ['run-1:refund', lost('agent.refund')],
      ] as const) {
        expect((await outbound.invoke(tool, { key, args: { n: 0 } })).kind).toBe('needs_reconciliation')
      }
      const after = await scrape()
      expect(after.length, `before: ${before.length} bytes`).toBeLessThan(200 * 1024)
      expect(after).toContain('hookledger_operations{tool="other",status="needs_reconciliation"} 3000')
      expect(after).toContain('hookledger_operations{tool="charge",status="needs_reconciliation"} 1')
      expect(after).toContain('hookledger_operations{tool="agent.refund",status="needs_reconciliation"} 1')
      expect(after).not.toContain('agent_tool_')
    } finally {
      await running.close()
    }
  }, 180_000)
})
