import { ConfigError } from '../config/config.js'
import type { Logger } from '../logger.js'
import { briefConnection } from './connections.js'

/** The Redis key that names the deployment a fixed `queue.prefix` belongs to. */
export function prefixOwnerKey(prefix: string): string {
  return `${prefix}:hookledger:deployment`
}

/**
 * Two deployments (two databases) with the same fixed `queue.prefix` would consume each other's
 * jobs: a worker leases a row id its own database does not have and drops the job as "missing". The
 * first deployment to start records its id under the prefix (SET NX); any other one refuses to start.
 * When Redis cannot be asked, the process starts anyway (the ledger keeps accepting, the relay
 * enqueues later) and says so, because refusing would turn a Redis outage into an api outage.
 */
export async function claimQueuePrefix(options: {
  redisUrl: string
  prefix: string
  deploymentId: string
  logger: Logger
}): Promise<void> {
  const { prefix, deploymentId, logger } = options
  const key = prefixOwnerKey(prefix)
  const redis = briefConnection(options.redisUrl)
  redis.on('error', () => {}) // the failed command below reports it
  let owner: string | null
  try {
    const claimed = await redis.set(key, deploymentId, 'NX')
    owner = claimed === 'OK' ? deploymentId : await redis.get(key)
  } catch (error) {
    logger.warn(
      { err: error, queuePrefix: prefix },
      'could not check which deployment owns queue.prefix (Redis did not answer); starting anyway',
    )
    return
  } finally {
    redis.disconnect()
  }
  if (owner !== null && owner !== deploymentId) {
    throw new ConfigError(
      `invalid config:\n  - queue.prefix: '${prefix}' belongs to deployment ${owner} (Redis key ${key}), ` +
        `not to this database's deployment ${deploymentId}; two deployments on one prefix take each ` +
        `other's jobs. Choose another prefix, or remove queue.prefix to use the per-deployment default; ` +
        `if deployment ${owner} is gone for good, delete the key (redis-cli DEL ${key}).`,
    )
  }
}
