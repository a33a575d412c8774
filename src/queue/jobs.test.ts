import { describe, expect, it } from 'vitest'
import { queuePrefixOf } from './jobs.js'

describe('the queue prefix', () => {
  const deploymentId = '0b6f6d2e-3c1a-4f57-9a43-2d5c1e7a9b10'

  it('is a hash tag on a Redis Cluster, so every key of a queue shares one slot', () => {
    expect(queuePrefixOf({ configured: undefined, deploymentId, redisUrl: 'redis+cluster://a:7000' })).toBe(
      `{hookledger-${deploymentId}}`,
    )
    expect(queuePrefixOf({ configured: 'shop', deploymentId, redisUrl: 'rediss+cluster://a:7000' })).toBe(
      '{shop}',
    )
  })

  it('stays as it was on one server: a running deployment keeps the keys its jobs are under', () => {
    expect(queuePrefixOf({ configured: undefined, deploymentId, redisUrl: 'redis://a:6379' })).toBe(
      `hookledger-${deploymentId}`,
    )
    expect(queuePrefixOf({ configured: 'shop', deploymentId, redisUrl: undefined })).toBe('shop')
  })
})
