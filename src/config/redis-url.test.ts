import { describe, expect, it } from 'vitest'
import { readEnvironment } from './env.js'
import { parseRedisUrl } from './redis-url.js'

describe('REDIS_URL', () => {
  it('names one server as ioredis reads it', () => {
    expect(parseRedisUrl('rediss://user:pw@cache:6380/2')).toEqual({
      kind: 'server',
      url: 'rediss://user:pw@cache:6380/2',
    })
  })

  it('names a cluster by its startup nodes, with credentials and TLS', () => {
    expect(parseRedisUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001,[::1]')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 7001 },
        { host: '::1', port: 6379 },
      ],
      tls: false,
      username: undefined,
      password: undefined,
    })
    expect(parseRedisUrl('rediss+cluster://app:p%40ss@a.example:6379,b.example:6379/')).toMatchObject({
      kind: 'cluster',
      tls: true,
      username: 'app',
      password: 'p@ss',
    })
  })

  it('refuses what would quietly connect elsewhere: an empty node, a database number, another scheme', () => {
    expect(() => parseRedisUrl('redis+cluster://a:7000,,b:7001')).toThrow("cluster node '' must be host:port")
    // A cluster has database 0 only.
    expect(() => parseRedisUrl('redis+cluster://a:7000/3')).toThrow("cluster node 'a:7000/3'")
    expect(() => parseRedisUrl('http://a:7000')).toThrow('must be a redis://')
    expect(() => readEnvironment({ REDIS_URL: 'redis+cluster://' })).toThrow(
      "REDIS_URL: cluster node '' must be host:port",
    )
    expect(readEnvironment({ REDIS_URL: 'redis+cluster://a:7000,b:7001' }).REDIS_URL).toBe(
      'redis+cluster://a:7000,b:7001',
    )
  })
})
