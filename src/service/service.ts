import type { AddressInfo } from 'node:net'
import { type ServerType, serve } from '@hono/node-server'
import { Queue } from 'bullmq'
import { sql } from 'drizzle-orm'
import type postgres from 'postgres'
import { type Config, ConfigError, loadConfig } from '../config/config.js'
import type { Environment } from '../config/env.js'
import { createClaimBatcher } from '../db/claims.js'
import { openLedger } from '../db/client.js'
import { migrateLedger, readDeploymentId } from '../db/migrate.js'
import { settlesWithin, withDeadline } from '../deadline.js'
import { createFailpoints } from '../failpoints.js'
import { forwardHandler } from '../handlers/forward.js'
import type { EventHandler } from '../handlers/types.js'
import { createApp, createHealthApp } from '../http/app.js'
import type { ReadinessCheck } from '../http/routes/health.js'
import { createLogger, type Logger } from '../logger.js'
import { addGauge, createMetrics, type Metrics } from '../metrics.js'
import { createOutboundLedger, type OutboundLedger } from '../outbound/ledger.js'
import {
  RECONCILE_QUEUE,
  type ReconcileJobData,
  reconcileScheduler,
  startReconciler,
} from '../outbound/reconcile.js'
import type { Tool } from '../outbound/tools.js'
import { consumerConnection, producerConnection } from '../queue/connections.js'
import { createEnqueuer } from '../queue/enqueuer.js'
import {
  deploymentQueuePrefix,
  INBOUND_QUEUE,
  type ProcessEventData,
  processEventJobOptions,
} from '../queue/jobs.js'
import { startRelay } from '../queue/relay.js'
import { retentionWarnings, startRetention } from '../queue/retention.js'
import { startWorker } from '../queue/worker.js'

export type Role = 'all' | 'api' | 'worker'

export interface ServiceOptions {
  env: Environment
  /** Defaults to the file named by HOOKLEDGER_CONFIG. */
  config?: Config
  role?: Role
  /** Handlers registered in code, by source id; a source has either one of these or a config handler. */
  handlers?: Readonly<Record<string, EventHandler>>
  logger?: Logger
  /** Tools that reconciliation must find by name after a restart (those with a `reconcile`). */
  tools?: readonly Tool<never, unknown>[]
}

export interface Service {
  /** The base URL: the whole api, or only /healthz and /readyz for the worker role. */
  url: string
  deploymentId: string
  queuePrefix: string
  /** The outbound ledger this process's handlers and agents' API use. */
  outbound: OutboundLedger
  /** Stops accepting, drains running jobs, then closes the queue, Redis and Postgres, in that order. */
  close(): Promise<void>
}

/** Starts the roles of one hookledger process against one Postgres and one Redis. */
export async function startService(options: ServiceOptions): Promise<Service> {
  const { env } = options
  const role = options.role ?? 'all'
  const logger = options.logger ?? createLogger(env.LOG_LEVEL)
  const config = options.config ?? (await loadConfig(env.HOOKLEDGER_CONFIG, env.lookup))
  const runsWorker = role !== 'api'
  const handlers = runsWorker
    ? resolveHandlers(config, options.handlers ?? {})
    : new Map<string, EventHandler>()
  const failpoints = createFailpoints(env.HOOKLEDGER_FAILPOINT)
  for (const warning of retentionWarnings(config)) logger.warn(warning)

  await migrateLedger(env.DATABASE_URL, logger)
  const ledger = openLedger(env.DATABASE_URL, { max: runsWorker ? config.file.worker.concurrency + 10 : 20 })
  const deploymentId = await readDeploymentId(ledger.db)
  const queuePrefix = config.file.queue.prefix ?? deploymentQueuePrefix(deploymentId)

  const producer = producerConnection(env.REDIS_URL)
  producer.on('error', () => {}) // reported by readiness and by the enqueue that fails
  const queue = new Queue<ProcessEventData>(INBOUND_QUEUE, {
    connection: producer,
    prefix: queuePrefix,
    defaultJobOptions: processEventJobOptions,
  })
  queue.on('error', () => {})
  const enqueuer = createEnqueuer({ queue, sql: ledger.sql, logger, failpoints })

  const reconcileQueue = new Queue<ReconcileJobData>(RECONCILE_QUEUE, {
    connection: producer,
    prefix: queuePrefix,
  })
  reconcileQueue.on('error', () => {})
  const outbound = createOutboundLedger({
    db: ledger.db,
    logger,
    settings: config.file.outbound,
    scheduler: reconcileScheduler(reconcileQueue),
    failpoints,
    tools: options.tools ?? [],
  })

  const metrics = createMetrics()
  addLedgerGauges(metrics, ledger.sql, queue)
  const readiness: ReadinessCheck[] = [
    { name: 'postgres', check: () => ledger.db.execute(sql`select 1`) },
    { name: 'redis', check: () => producer.ping() },
  ]
  // A worker-only process serves /healthz and /readyz alone, so orchestrators can watch it too.
  const app =
    role === 'worker'
      ? createHealthApp(readiness, metrics, logger)
      : createApp({
          config,
          db: ledger.db,
          claims: createClaimBatcher(ledger.sql, {
            beforeCommit: () => failpoints.hit('receive.before_commit'),
            afterCommit: () => failpoints.hit('receive.after_commit'),
          }),
          enqueuer,
          logger,
          metrics,
          readiness,
          outbound,
          adminToken: env.ADMIN_TOKEN,
          agentToken: env.AGENT_TOKEN,
          dashboardQueues: [queue, reconcileQueue],
        })
  const server = await new Promise<ServerType>((resolve) => {
    const started = serve({ fetch: app.fetch, port: env.PORT, hostname: env.HOST }, () => resolve(started))
  })
  const address = server.address() as AddressInfo
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`
  logger.info(
    { url, role, deploymentId, queuePrefix, sources: [...config.sources.keys()] },
    'hookledger listening',
  )

  const consumer = runsWorker ? consumerConnection(env.REDIS_URL) : undefined
  consumer?.on('error', () => {})
  const worker =
    consumer === undefined
      ? undefined
      : startWorker({
          connection: consumer,
          prefix: queuePrefix,
          db: ledger.db,
          sql: ledger.sql,
          handlers,
          settings: config.file.worker,
          logger,
          metrics,
          failpoints,
          outbound,
        })
  const reconcilerConnection = runsWorker ? consumerConnection(env.REDIS_URL) : undefined
  reconcilerConnection?.on('error', () => {})
  const reconciler =
    reconcilerConnection === undefined
      ? undefined
      : startReconciler({
          connection: reconcilerConnection,
          prefix: queuePrefix,
          db: ledger.db,
          queue: reconcileQueue,
          ledger: outbound,
          logger,
        })
  const relay = runsWorker
    ? startRelay({ db: ledger.db, enqueuer, settings: config.file.relay, logger })
    : undefined
  const retention = runsWorker ? startRetention({ sql: ledger.sql, config, logger }) : undefined
  if (runsWorker)
    logger.info({ role, concurrency: config.file.worker.concurrency }, 'hookledger worker started')

  let closing: Promise<void> | undefined
  return {
    url,
    deploymentId,
    queuePrefix,
    outbound,
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => server.close(() => resolve()))
        await settlesWithin(enqueuer.drain(), 3000)
        await settlesWithin(relay?.stop() ?? Promise.resolve(), 3000)
        await settlesWithin(retention?.stop() ?? Promise.resolve(), 3000)
        // Running handlers get a deadline to finish; after it, their rows stay leased and another
        // worker takes them over when the lease runs out (their transactions roll back).
        if (worker !== undefined && !(await settlesWithin(worker.close(), SHUTDOWN_DRAIN_MS))) {
          logger.warn(
            { deadlineMs: SHUTDOWN_DRAIN_MS },
            'jobs still running at the shutdown deadline; abandoning them',
          )
          await settlesWithin(worker.close(true), 1000)
        }
        await settlesWithin(reconciler?.close() ?? Promise.resolve(), SHUTDOWN_DRAIN_MS)
        await settlesWithin(queue.close(), 2000)
        await settlesWithin(reconcileQueue.close(), 2000)
        producer.disconnect()
        consumer?.disconnect()
        reconcilerConnection?.disconnect()
        await ledger.close()
        logger.info('hookledger stopped')
      })()
      return closing
    },
  }
}

/** Read on scrape: the ledger's events by status, and the queue's jobs by state. */
function addLedgerGauges(metrics: Metrics, client: postgres.Sql, queue: Queue<ProcessEventData>) {
  addGauge(metrics, {
    name: 'hookledger_events',
    help: 'Inbound events in the ledger, by source and status',
    labelNames: ['source', 'status'],
    read: async () => {
      const rows = await client<Array<{ source: string; status: string; n: number }>>`
        select source, status::text as status, count(*)::int as n from inbound_events group by source, status`
      return rows.map((row) => ({ labels: { source: row.source, status: row.status }, value: row.n }))
    },
  })
  addGauge(metrics, {
    name: 'hookledger_queue_jobs',
    help: 'Jobs in the inbound queue, by state',
    labelNames: ['state'],
    read: async () => {
      const counts = await withDeadline(
        queue.getJobCounts('waiting', 'active', 'delayed', 'failed'),
        2000,
        'Redis did not answer the job counts',
      )
      return Object.entries(counts).map(([state, value]) => ({ labels: { state }, value }))
    },
  })
}

const SHUTDOWN_DRAIN_MS = 10_000

function resolveHandlers(
  config: Config,
  code: Readonly<Record<string, EventHandler>>,
): Map<string, EventHandler> {
  const handlers = new Map<string, EventHandler>()
  const problems: string[] = []
  for (const id of Object.keys(code)) {
    if (!config.sources.has(id)) problems.push(`handlers.${id}: no source with that id is configured`)
  }
  for (const [id, source] of config.sources) {
    const fromCode = code[id]
    const fromConfig = source.config.handler
    if (fromCode !== undefined && fromConfig !== undefined) {
      problems.push(`source '${id}': has a handler in the config file and one registered in code; keep one`)
    } else if (fromCode !== undefined) {
      handlers.set(id, fromCode)
    } else if (fromConfig !== undefined) {
      handlers.set(id, forwardHandler(fromConfig))
    } else {
      problems.push(
        `source '${id}': handler: none configured (add "handler" to the source, or register one in code)`,
      )
    }
  }
  if (problems.length > 0)
    throw new ConfigError(`invalid config:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  return handlers
}
