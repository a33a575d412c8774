import client from 'prom-client'

/** Label for deliveries to a source that is not configured: keeps arbitrary URLs out of label values. */
export const UNKNOWN_SOURCE_LABEL = '(unknown)'

/**
 * Label values come from the configuration only (sources, routes, the tools named in code, the
 * built-in ones and `outbound.tools`): anything else, such as a tool name an agent made up, is
 * counted under this one, so the number of series is bounded by the config, not by the traffic.
 */
export const OTHER_LABEL = 'other'

export interface Metrics {
  registry: client.Registry
  /** Every answer of `/webhooks/:source`, by source and outcome (accepted, duplicate, conflict, or the rejection code). */
  deliveries: client.Counter<'source' | 'outcome'>
  /** From receipt to DONE or FAILED, by source and final status. */
  processingSeconds: client.Histogram<'source' | 'status'>
  /** Handler attempts, by source and result. */
  attempts: client.Counter<'source' | 'result'>
  /**
   * Attempts to make a Redis connection again, by connection (`producer`, `worker`, `guard`): Redis
   * closed it, went away, or the path to it went silent past the connection's limit.
   */
  redisReconnects: client.Counter<'connection'>
  /**
   * A gauge's read failed at a scrape (`addGauge`), which then had no samples of it: counted in
   * `hookledger_gauge_read_failures_total`, and told to createMetrics' caller at most once a minute
   * per gauge.
   */
  gaugeReadFailed(gauge: string, error: unknown): void
  /**
   * The registry in Prometheus's text format, shared: scrapes that arrive while one is being built
   * wait for it, and its result serves every scrape for SCRAPE_CACHE_MS after, so any number of
   * scrapers cost the ledger one round of gauge queries per interval.
   */
  scrape(): Promise<string>
}

export const SCRAPE_CACHE_MS = 1000
const GAUGE_FAILURE_TOLD_EVERY_MS = 60_000

/**
 * One registry per app instance (never the global one), so tests and several services in one
 * process each count their own. Gauges that read the ledger or the queue are added by the caller
 * with `addGauge`, and run only when /metrics is scraped.
 */
export function createMetrics(
  /** Where a gauge's failed read is told (the process's log); at most once a minute per gauge. */
  onGaugeReadFailure: (gauge: string, error: unknown) => void = () => {},
): Metrics {
  const registry = new client.Registry()
  const toldAt = new Map<string, number>()
  const gaugeReadFailures = new client.Counter({
    name: 'hookledger_gauge_read_failures_total',
    help: 'Scrapes at which a gauge could not be read (its store down or silent): that scrape had no samples of it',
    labelNames: ['gauge'],
    registers: [registry],
  })
  // The default metrics are already named process_… and nodejs_…: the prefix only adds the project.
  client.collectDefaultMetrics({ register: registry, prefix: 'hookledger_' })
  return {
    registry,
    scrape: sharedScrape(registry, SCRAPE_CACHE_MS),
    deliveries: new client.Counter({
      name: 'hookledger_deliveries_total',
      help: 'Deliveries answered by /webhooks/:source, by source and outcome',
      labelNames: ['source', 'outcome'],
      registers: [registry],
    }),
    processingSeconds: new client.Histogram({
      name: 'hookledger_event_processing_seconds',
      help: 'Time from receipt to DONE or FAILED',
      labelNames: ['source', 'status'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600],
      registers: [registry],
    }),
    redisReconnects: new client.Counter({
      name: 'hookledger_redis_reconnects_total',
      help: 'Attempts to make a Redis connection again (closed, gone, or silent past its limit), by connection',
      labelNames: ['connection'],
      registers: [registry],
    }),
    gaugeReadFailed(gauge, error) {
      gaugeReadFailures.inc({ gauge })
      if (Date.now() - (toldAt.get(gauge) ?? Number.NEGATIVE_INFINITY) < GAUGE_FAILURE_TOLD_EVERY_MS) return
      toldAt.set(gauge, Date.now())
      onGaugeReadFailure(gauge, error)
    },
    attempts: new client.Counter({
      name: 'hookledger_handler_attempts_total',
      help: 'Handler attempts, by source and result (done, error)',
      labelNames: ['source', 'result'],
      registers: [registry],
    }),
  }
}

/**
 * A gauge whose values are read on scrape: `read` returns one value per label set. A read that fails
 * leaves the gauge without samples in that scrape and counts the failure
 * (`hookledger_gauge_read_failures_total`), rather than failing the whole scrape: during an outage of
 * Redis or PostgreSQL, /metrics still serves the counters, the process metrics and every gauge whose
 * store answers — `hookledger_events_unqueued` is read from PostgreSQL while Redis is down.
 */
export function addGauge<Label extends string>(
  metrics: Metrics,
  options: {
    name: string
    help: string
    labelNames: readonly Label[]
    read: () => Promise<Array<{ labels: Partial<Record<Label, string>>; value: number }>>
  },
): void {
  new client.Gauge<Label>({
    name: options.name,
    help: options.help,
    labelNames: options.labelNames,
    registers: [metrics.registry],
    async collect() {
      this.reset()
      let samples: Awaited<ReturnType<typeof options.read>>
      try {
        samples = await options.read()
      } catch (error) {
        metrics.gaugeReadFailed(options.name, error)
        return
      }
      for (const { labels, value } of samples) this.set(labels, value)
    },
  })
}

/** One registry read at a time, its text reused for `cacheMs`; a failed read is not cached. */
function sharedScrape(registry: client.Registry, cacheMs: number): () => Promise<string> {
  let inFlight: Promise<string> | undefined
  let cached: { text: string; until: number } | undefined
  return () => {
    if (cached !== undefined && Date.now() < cached.until) return Promise.resolve(cached.text)
    inFlight ??= registry
      .metrics()
      .then((text) => {
        cached = { text, until: Date.now() + cacheMs }
        return text
      })
      .finally(() => {
        inFlight = undefined
      })
    return inFlight
  }
}
