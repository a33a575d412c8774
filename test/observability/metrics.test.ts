import { describe, expect, it } from 'vitest'
import { createMetrics } from '../../src/metrics.js'

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
