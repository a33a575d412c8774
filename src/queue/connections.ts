import { Redis } from 'ioredis'

/**
 * For the HTTP path: fails fast and queues nothing while disconnected, so a dead Redis can never
 * delay or fail a 200 that the ledger commit already earned. The relay enqueues what it missed.
 */
export function producerConnection(url: string): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    lazyConnect: false,
  })
}

/** For workers and the relay: waits for Redis as long as it takes (BullMQ requires null retries). */
export function consumerConnection(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, connectTimeout: 5000 })
}
