import client from 'prom-client'
import type { Metrics } from '../metrics.js'
import type { BackfillReport } from './sweep.js'

/** Counts what the service's passes did, on /metrics beside the deliveries they complement. */
export function backfillMetrics(metrics: Metrics): (report: BackfillReport) => void {
  const passes = new client.Counter({
    name: 'hookledger_backfill_passes_total',
    help: 'Backfill passes, by source and result (complete, partial, or the error code that stopped it)',
    labelNames: ['source', 'result'],
    registers: [metrics.registry],
  })
  const items = new client.Counter({
    name: 'hookledger_backfill_items_total',
    help: 'What backfill passes found, by source and outcome (claimed, duplicate, conflict, redelivery_requested)',
    labelNames: ['source', 'outcome'],
    registers: [metrics.registry],
  })
  return (report) => {
    const source = report.source
    passes.inc({ source, result: report.error?.code ?? (report.complete ? 'complete' : 'partial') })
    const counts = {
      claimed: report.claimed.length,
      duplicate: report.duplicates,
      conflict: report.conflicts.length,
      redelivery_requested: report.redelivered.length,
    }
    for (const [outcome, count] of Object.entries(counts))
      if (count > 0) items.inc({ source, outcome }, count)
  }
}
