import { describe, expect, it } from 'vitest'
import { readEnvironment } from './env.js'

describe('HOST', () => {
  it('defaults to loopback in embedded mode: a laptop does not serve /metrics and the webhooks to its network', () => {
    expect(readEnvironment({}).HOST).toBe('127.0.0.1')
    expect(readEnvironment({ DATABASE_URL: '' }).HOST).toBe('127.0.0.1')
  })

  it('defaults to every interface with an external PostgreSQL (a container, a server)', () => {
    expect(readEnvironment({ DATABASE_URL: 'postgres://db/hookledger' }).HOST).toBe('0.0.0.0')
  })

  it('is what HOST says when it is set', () => {
    expect(readEnvironment({ HOST: '0.0.0.0' }).HOST).toBe('0.0.0.0')
    expect(readEnvironment({ HOST: '::1', DATABASE_URL: 'postgres://db/x' }).HOST).toBe('::1')
  })
})
