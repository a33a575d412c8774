import type { AddressInfo } from 'node:net'
import { type ServerType, serve } from '@hono/node-server'
import type { Queue } from 'bullmq'
import { alertToolName } from '../alerts/channels.js'
import { circuitOpenAlert, createAlertMonitor, routeDisabledAlert } from '../alerts/monitor.js'
import { startBackfill } from '../backfill/loop.js'
import { backfillMetrics } from '../backfill/metrics.js'
import type { Config } from '../config/config.js'
import { type Environment, EnvironmentError, tracingSettings } from '../config/env.js'
import { createClaimBatcher } from '../db/claims.js'
import {
  connectionsBesidePool,
  GENERIC_PLAN_MAX_PERIODS,
  ledgerPoolSize,
  ledgerTakesWrites,
  openLedger,
  scopeLedger,
} from '../db/client.js'
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../db/embedded.js'
import { readLedgerPeriodsHeld } from '../db/ledger-periods.js'
import { migrateLedger, readDeploymentId } from '../db/migrate.js'
import { settlesWithin } from '../deadline.js'
import { startDeliveryControl } from '../delivery/control.js'
import { FORWARD_TOOL } from '../delivery/forward.js'
import { resolveHandlers } from '../delivery/source-handlers.js'
import { createFailpoints } from '../failpoints.js'
import { createApp, createHealthApp } from '../http/app.js'
import { NotReady, type ReadinessCheck } from '../http/routes/health.js'
import { createBackpressure } from '../inbound/backpressure.js'
import { checkDedupKeys } from '../inbound/dedup-key-drift.js'
import { evidenceIntake } from '../inbound/evidence.js'
import { createLogger, type Logger } from '../logger.js'
import { createMetrics } from '../metrics.js'
import type { EventHandler } from '../outbound/event-handler.js'
import { addOutboundGauges } from '../outbound/gauges.js'
import { createOutboundLedger, eventInvoker, type OutboundLedger } from '../outbound/ledger.js'
import { reconcileScheduler, startReconciler } from '../outbound/reconcile.js'
import type { Tool } from '../outbound/tools.js'
import type { QueueBackend } from '../queue/backend.js'
import { createBullmqBackend } from '../queue/bullmq.js'
import { createEnqueuer } from '../queue/enqueuer.js'
import { addLedgerGauges } from '../queue/gauges.js'
import type { SourceHandler } from '../queue/handler.js'
import { createInProcessBackend } from '../queue/in-process.js'
import {
  INBOUND_QUEUE,
  type ProcessEventData,
  processEventJobOptions,
  queuePrefixOf,
  RECONCILE_QUEUE,
  type ReconcileJobData,
  reconcileJobOptions,
} from '../queue/jobs.js'
import { claimQueuePrefix } from '../queue/prefix-owner.js'
import { type RedisWatch, redisProblems, watchRedis } from '../queue/redis-health.js'
import { startRelay } from '../queue/relay.js'
import { type HereLease, startWorker } from '../queue/worker.js'
import { startRetention } from '../retention/loop.js'
import { extendPartitions, ledgerPeriodsKept, usesGenericPlans } from '../retention/partitions.js'
import { retentionWarnings } from '../retention/provider-horizon.js'
import { startTracing } from '../tracing.js'
import { loadConfig } from './config.js'

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
  /**
   * The ledger's PostgreSQL: DATABASE_URL, or in embedded mode the server this process started, for
   * an application's own tables beside the ledger (examples/code-handler.mjs).
   */
  databaseUrl: string
  deploymentId: string
  queuePrefix: string
  /** The outbound ledger this process's handlers and agents' API use. */
  outbound: OutboundLedger
  /** Which queue carries the jobs: BullMQ on Redis (its queues, for a dashboard), or this process's memory. */
  queue: { kind: 'bullmq'; queues: readonly Queue[] } | { kind: 'in-process' }
  /** Stops accepting, drains running jobs, then closes the queue, Redis and Postgres, in that order. */
  close(): Promise<void>
}

/** Starts the roles of one hookledger process against one Postgres, and one Redis unless REDIS_URL is unset. */
export async function startService(options: ServiceOptions): Promise<Service> {
  const { env } = options
  const role = options.role ?? 'all'
  const logger = options.logger ?? createLogger(env.LOG_LEVEL)
  requireOneProcess(env, role)
  if (env.REDIS_URL === undefined) {
    logger.warn(
      { queue: 'in-process' },
      'REDIS_URL is unset: jobs run in an in-process queue. Run ONE hookledger process against this ' +
        'database; not for production (no scaling out, no queue dashboard). Set REDIS_URL for BullMQ.',
    )
  }
  const config = options.config ?? (await loadConfig(env.HOOKLEDGER_CONFIG, env.lookup))
  const runsWorker = role !== 'api'
  // Checked now, before any connection: a handler missing for a route or a source fails the start.
  if (runsWorker) resolveHandlers(config, options.handlers ?? {}, undefined)
  const failpoints = createFailpoints(env.HOOKLEDGER_FAILPOINT)
  for (const warning of retentionWarnings(config)) logger.warn(warning)
  const poolSize = ledgerPoolSize({
    configured: config.file.database.poolSize,
    runsApi: role !== 'worker',
    runsWorker,
    workerConcurrency: config.file.worker.concurrency,
  })

  let databaseUrl = env.DATABASE_URL
  let embedded: EmbeddedPostgres | undefined
  if (databaseUrl === undefined) {
    embedded = await startEmbeddedPostgres(env.HOOKLEDGER_DATA_DIR, logger)
    databaseUrl = embedded.url
    logger.warn(
      { dataDir: embedded.dataDir },
      'EMBEDDED MODE: DATABASE_URL is not set, so the ledger lives in an embedded PostgreSQL in the data ' +
        'folder; one process only, for development and trials. Set DATABASE_URL (and REDIS_URL) in production.',
    )
  }
  await migrateLedger(databaseUrl, logger)
  const timeouts = config.file.database.statementTimeoutMs
  // A ledger of many periods plans the worker's statements at each call (GENERIC_PLAN_MAX_PERIODS).
  const periodsHeld = await readLedgerPeriodsHeld(databaseUrl)
  const genericPlans = usesGenericPlans(config, periodsHeld)
  const ledger = openLedger(databaseUrl, {
    max: poolSize,
    statementTimeoutMs: Math.max(...Object.values(timeouts)),
    // A transaction waits for its handler between two statements (a code handler's, under its deadline).
    idleInTransactionMs: config.file.worker.handlerTimeoutMs + IDLE_IN_TRANSACTION_MARGIN_MS,
    genericPlans,
  })
  if (!genericPlans) {
    logger.info(
      { periodsKept: ledgerPeriodsKept(config), periodsHeld, most: GENERIC_PLAN_MAX_PERIODS },
      "the ledger keeps or holds more periods than a generic plan should lock: the worker's batched statements " +
        'are planned at each call (retention.partitionPeriod "week" keeps fewer periods)',
    )
  }
  // Each part of the process bounds its statements by its own deadline; a pass of a loop that runs
  // twice that long is logged as stuck.
  const scopes = scopeLedger(ledger, timeouts)
  const stuckAfterMs = (scope: keyof typeof timeouts) => 2 * timeouts[scope]
  const deploymentId = await readDeploymentId(ledger.db)
  try {
    // Before the first claim: a ledger stopped for days has no partition for today yet.
    await extendPartitions(ledger.sql, config, logger)
    await checkDedupKeys(ledger.sql, config, logger)
  } catch (error) {
    await ledger.close()
    await embedded?.stop()
    throw error
  }
  const queuePrefix = queuePrefixOf({
    configured: config.file.queue.prefix,
    deploymentId,
    redisUrl: env.REDIS_URL,
  })
  if (env.REDIS_URL !== undefined && config.file.queue.prefix !== undefined) {
    try {
      await claimQueuePrefix({ redisUrl: env.REDIS_URL, prefix: queuePrefix, deploymentId, logger })
    } catch (error) {
      await ledger.close()
      await embedded?.stop()
      throw error
    }
  }

  const metrics = createMetrics((gauge, error) =>
    logger.warn({ err: error, gauge }, `/metrics: gauge ${gauge} could not be read; scrapes leave it out`),
  )
  const backend: QueueBackend =
    env.REDIS_URL === undefined
      ? createInProcessBackend()
      : createBullmqBackend({
          url: env.REDIS_URL,
          prefix: queuePrefix,
          logger,
          onReconnect: (connection) => metrics.redisReconnects.inc({ connection }),
        })
  const redisWatch =
    backend.kind === 'bullmq'
      ? watchRedis({ inspect: () => backend.inspect(), logger, intervalMs: REDIS_CHECK_MS })
      : undefined
  // Said at start, before the process listens: an evicting Redis loses jobs from the first event on.
  if (redisWatch !== undefined) await settlesWithin(redisWatch.check(), 2000)
  const queue = backend.queue<ProcessEventData>(INBOUND_QUEUE, processEventJobOptions)
  // Bound once the worker starts (a process that runs one): the rows it claims start in it.
  let runHere: ((eventRowId: string) => boolean) | undefined
  let reserveHere: (() => HereLease | undefined) | undefined
  const queueTakesJobs = () =>
    backend.kind === 'in-process' || (backend.connected() && redisWatch?.last()?.refusingWrites !== true)
  const enqueuer = createEnqueuer({
    queue,
    sql: scopes.worker.genericPlans,
    logger,
    failpoints,
    markDelayMs: Math.floor(config.file.relay.graceMs / 2),
    // Only while Redis takes jobs: what such a row must do later (a retry, a wait) needs a job, and
    // with Redis down or full the rows wait for the relay as every other process's do.
    runHere: (eventRowId) => queueTakesJobs() && (runHere?.(eventRowId) ?? false),
  })

  const reconcileQueue = backend.queue<ReconcileJobData>(RECONCILE_QUEUE, reconcileJobOptions)
  const outbound = createOutboundLedger({
    db: scopes.worker.db,
    logger,
    settings: config.file.outbound,
    scheduler: reconcileScheduler(reconcileQueue),
    failpoints,
    tools: options.tools ?? [],
  })

  // Off unless an OTLP endpoint is set: then the SDK is loaded, and flushed last by close().
  const tracing = await startTracing(tracingSettings(env))
  if (tracing.enabled) {
    logger.info(
      {
        tracesOrigin: new URL(tracingSettings(env).tracesUrl ?? '').origin,
        sampler: env.OTEL_TRACES_SAMPLER,
      },
      'tracing on',
    )
  }
  // Read when /metrics is scraped: a request.
  addLedgerGauges(metrics, scopes.request.sql, queue, [...config.sources.keys()], config.file.relay.graceMs)
  addOutboundGauges(metrics, scopes.request.sql, {
    // Labels only for the tools this deployment names: its own, those in code, those in the config.
    tools: [
      FORWARD_TOOL,
      ...config.alertChannels.map((channel) => alertToolName(channel.type)),
      ...(options.tools ?? []).map((tool) => tool.name),
      ...Object.keys(config.file.outbound.tools),
    ],
    operationDays: config.file.retention.operationDays,
  })
  const alerts = runsWorker
    ? createAlertMonitor({
        config,
        sql: scopes.alerts.sql,
        outbound,
        logger,
        stuckAfterMs: stuckAfterMs('alerts'),
      })
    : undefined
  // Every role: the worker guards its deliveries, the api shows the circuits on /metrics and the admin page.
  // Bound once the worker starts: an ordering key's hand-off runs the next event in it.
  let runNow: ((eventRowId: string) => void) | undefined
  const delivery = startDeliveryControl({
    config,
    redisUrl: env.REDIS_URL,
    queuePrefix,
    ledger: scopes.worker,
    logger,
    metrics,
    invoker: eventInvoker(outbound),
    failpoints,
    queue,
    runNow: (eventRowId) => {
      runNow?.(eventRowId)
      return runNow !== undefined
    },
    events: {
      onRouteDisabled: (source, route, reason) => alerts?.notify(routeDisabledAlert(source, route, reason)),
      onCircuitOpen: (id, coolDownMs) =>
        alerts?.notify(circuitOpenAlert(id, new Date(Date.now() + coolDownMs))),
    },
  })
  alerts?.start(delivery)
  const readiness: ReadinessCheck[] = [
    {
      name: 'postgres',
      check: async () => {
        if (!(await ledgerTakesWrites(scopes.request.sql))) {
          throw new NotReady(
            'read-only: the server refuses writes (a standby, or default_transaction_read_only)',
          )
        }
      },
    },
    redisWatch === undefined
      ? { name: 'queue', check: async () => {}, ok: 'in-process' }
      : redisReadiness(redisWatch, role),
  ]
  const claims = createClaimBatcher(scopes.request.sql, {
    deadlineMs: timeouts.request,
    beforeCommit: () => failpoints.hit('receive.before_commit'),
    afterCommit: () => failpoints.hit('receive.after_commit'),
    observe: (ms) => backpressure?.observeClaim(ms),
    inserted: (xid, rows) => backpressure?.inserted(xid, rows),
  })
  const backpressure =
    role === 'worker'
      ? undefined
      : createBackpressure({
          settings: config.file.server.backpressure,
          sql: scopes.request.sql,
          claimQueue: claims.queued,
          logger,
          metrics,
        })
  backpressure?.start()
  // A worker-only process serves /healthz and /readyz alone, so orchestrators can watch it too.
  const app =
    role === 'worker'
      ? createHealthApp(readiness, metrics, logger, env.METRICS_TOKEN)
      : createApp({
          config,
          db: scopes.request.db,
          claims,
          backpressure,
          enqueuer,
          // As runHere: only while Redis takes jobs, for what such a row must do later.
          reserveHere: () => (queueTakesJobs() ? reserveHere?.() : undefined),
          logger,
          metrics,
          readiness,
          outbound,
          adminToken: env.ADMIN_TOKEN,
          agentToken: env.AGENT_TOKEN,
          metricsToken: env.METRICS_TOKEN,
          dashboardQueues: backend.kind === 'bullmq' ? backend.queues() : undefined,
          circuit: delivery.circuit,
          tracing,
        })
  // What the app stands on, stopped last by close(), or at once when the address cannot be had, so
  // that a library caller's process can end.
  const stopFoundations = async () => {
    await settlesWithin(backpressure?.stop() ?? Promise.resolve(), 2000)
    await settlesWithin(alerts?.stop() ?? Promise.resolve(), 5000)
    await settlesWithin(delivery.close(), 2000)
    await settlesWithin(queue.close(), 2000)
    await settlesWithin(reconcileQueue.close(), 2000)
    redisWatch?.stop()
    await backend.close()
    await ledger.close()
    await embedded?.stop()
    // Last: the spans of everything above are ended by now, so they are in the last export.
    await settlesWithin(tracing.shutdown(), 5000)
  }
  let server: ServerType
  try {
    server = await listen(app.fetch, env, config)
  } catch (error) {
    await stopFoundations()
    throw listenProblem(error, env) ?? error
  }
  const address = server.address() as AddressInfo
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`
  logger.info(
    {
      url,
      role,
      deploymentId,
      queue: backend.kind,
      queuePrefix,
      poolSize,
      sources: [...config.sources.keys()],
    },
    'hookledger listening',
  )

  const handlers = runsWorker
    ? resolveHandlers(config, options.handlers ?? {}, {
        fanOut: delivery.fanOut,
        evidence: evidenceIntake({ config, db: scopes.worker.db, sql: scopes.worker.sql, logger }),
      })
    : new Map<string, SourceHandler>()
  const worker = runsWorker
    ? startWorker({
        backend,
        queue,
        db: scopes.worker.db,
        sql: scopes.worker.sql,
        handlers,
        settings: config.file.worker,
        logger,
        metrics,
        failpoints,
        tracing,
      })
    : undefined
  runNow = worker?.runNow
  runHere = worker?.runHere
  reserveHere = worker?.reserveHere
  const reconciler = runsWorker
    ? startReconciler({
        backend,
        db: scopes.reconciler.db,
        queue: reconcileQueue,
        ledger: outbound,
        logger,
        stuckAfterMs: stuckAfterMs('reconciler'),
      })
    : undefined
  const relay = runsWorker
    ? startRelay({
        db: scopes.relay.db,
        queue,
        // Its own, so that marking the rows it enqueued is a relay statement.
        enqueuer: createEnqueuer({ queue, sql: scopes.relay.genericPlans, logger, failpoints }),
        settings: config.file.relay,
        logger,
        stuckAfterMs: stuckAfterMs('relay'),
        // The in-process queue died with the last process: resume its rows now, not orphanAfterMs later.
        resumeAtStart: backend.kind === 'in-process',
        // So does a flushed or restarted Redis: its loss is noticed at the next pass.
        store:
          backend.kind === 'bullmq'
            ? { emptied: () => backend.storeEmptied(), mark: () => backend.markStore() }
            : undefined,
      })
    : undefined
  const retention = runsWorker
    ? startRetention({
        sql: scopes.retention.sql,
        config,
        logger,
        stuckAfterMs: stuckAfterMs('retention'),
        genericPlans: connectionsBesidePool(databaseUrl, genericPlans) > 0,
      })
    : undefined
  const backfill = runsWorker
    ? startBackfill({
        sql: scopes.backfill.sql,
        config,
        logger,
        onAccepted: (id) => enqueuer.enqueue(id),
        onReport: backfillMetrics(metrics),
      })
    : undefined
  if (runsWorker)
    logger.info({ role, concurrency: config.file.worker.concurrency }, 'hookledger worker started')

  let closing: Promise<void> | undefined
  return {
    url,
    databaseUrl,
    deploymentId,
    queuePrefix,
    outbound,
    queue: backend.kind === 'bullmq' ? { kind: 'bullmq', queues: backend.queues() } : { kind: 'in-process' },
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => server.close(() => resolve()))
        // Before the enqueuer drains: a pass's last claims are enqueued (or left to the relay).
        await settlesWithin(backfill?.stop() ?? Promise.resolve(), 3000)
        await settlesWithin(enqueuer.drain(), 3000)
        await settlesWithin(relay?.stop() ?? Promise.resolve(), 3000)
        await settlesWithin(retention?.stop() ?? Promise.resolve(), 3000)
        // Running handlers get a deadline to finish; after it, their rows stay leased and another
        // worker takes them over when the lease runs out (their transactions roll back). The
        // reconciler's deadline runs beside it, not after: with a Redis that stopped answering each
        // close waits out its deadline, and one after the other they took 21 s of a shutdown.
        const closeWorker = async () => {
          if (worker !== undefined && !(await settlesWithin(worker.close(), SHUTDOWN_DRAIN_MS))) {
            logger.warn(
              { deadlineMs: SHUTDOWN_DRAIN_MS },
              'jobs still running at the shutdown deadline; abandoning them',
            )
            await settlesWithin(worker.close(true), 1000)
          }
        }
        await Promise.all([
          closeWorker(),
          settlesWithin(reconciler?.close() ?? Promise.resolve(), SHUTDOWN_DRAIN_MS),
        ])
        await stopFoundations()
        logger.info('hookledger stopped')
      })()
      return closing
    },
  }
}

/** Serves `fetch` on PORT and HOST; rejects when the address cannot be had. */
function listen(fetch: (request: Request) => Response | Promise<Response>, env: Environment, config: Config) {
  return new Promise<ServerType>((resolve, reject) => {
    const started = serve(
      { fetch, port: env.PORT, hostname: env.HOST, serverOptions: httpTimeouts(config.file.server) },
      () => {
        started.off('error', reject)
        resolve(started)
      },
    )
    started.once('error', reject)
  })
}

/** An address the operator can fix (taken, or not theirs to bind) as the environment mistake it is. */
function listenProblem(error: unknown, env: Environment): EnvironmentError | undefined {
  const code = (error as NodeJS.ErrnoException).code
  const address = `${env.HOST}:${env.PORT}`
  if (code === 'EADDRINUSE') {
    return new EnvironmentError([
      `PORT: ${address} is in use by another process; stop it or set another PORT`,
    ])
  }
  if (code === 'EACCES') {
    return new EnvironmentError([
      `PORT: ${address} needs privileges this process lacks; set a PORT above 1023`,
    ])
  }
  if (code === 'EADDRNOTAVAIL') {
    return new EnvironmentError([`HOST: ${env.HOST} is not an address of this machine`])
  }
  return undefined
}

/**
 * Embedded mode (DATABASE_URL unset) and the in-process queue (REDIS_URL unset) hold within one
 * process: an api-only process would leave jobs where no worker looks, a worker-only one would find
 * none, and the embedded PostgreSQL belongs to the one process that started it.
 */
function requireOneProcess(env: Environment, role: Role): void {
  if (role === 'all') return
  const problems: string[] = []
  if (env.DATABASE_URL === undefined) {
    problems.push(
      `DATABASE_URL: is required for --role ${role}; without it the ledger is an embedded PostgreSQL that one process (--role all) owns`,
    )
  }
  if (env.REDIS_URL === undefined) {
    problems.push(
      `REDIS_URL: is required for --role ${role}; without Redis the queue lives in one process, which must run the api and the worker (--role all)`,
    )
  }
  if (problems.length > 0) throw new EnvironmentError(problems)
}

const SHUTDOWN_DRAIN_MS = 10_000
/** Beyond a handler's deadline, what a transaction may spend between two statements. */
const IDLE_IN_TRANSACTION_MARGIN_MS = 10_000

/** How often the queue's Redis is checked for an evicting policy and refused writes (also on /readyz). */
const REDIS_CHECK_MS = 30_000

/**
 * Ready, degraded, when Redis answers but evicts or refuses writes: the api still commits every event
 * and the relay enqueues it once Redis takes it, so taking the process out of its balancer would turn
 * a delay into refused deliveries. For the same reason a process that serves the api stays ready,
 * degraded, when a Redis it reached since its start stops answering: every replica shares that Redis,
 * and a 503 would take them all out at once. Not ready (503) when Redis does not answer a worker-only
 * process (it has nothing to do without it), or any process that never reached it: a new replica
 * with a wrong REDIS_URL, or started during the outage, holds back a rollout instead of joining it.
 */
function redisReadiness(watch: RedisWatch, role: Role): ReadinessCheck {
  return {
    name: 'redis',
    check: async () => {
      const problems = redisProblems(await watch.check())
      return problems.length === 0 ? undefined : { degraded: problems.join('; ') }
    },
    degradedWhenFailing: () =>
      role === 'worker' || watch.last() === undefined
        ? undefined
        : 'unreachable: deliveries are committed and wait for the relay',
  }
}

/**
 * Node's defaults let a client drip its body for 300 s, and check only every 30 s: hundreds of slow
 * connections would then hold the server's sockets and memory. Timeouts are checked at least every
 * second (or twice per headers timeout, if shorter), so a slow client is cut off close to its limit.
 */
function httpTimeouts(settings: Config['file']['server']) {
  return {
    headersTimeout: settings.headersTimeoutMs,
    requestTimeout: settings.requestTimeoutMs,
    keepAliveTimeout: settings.keepAliveTimeoutMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(settings.headersTimeoutMs / 2))),
  }
}
