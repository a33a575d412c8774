import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

// Every operation writes one entry into one index on its key (migration 0019): the unique index is
// the claim's arbiter and, built with text_pattern_ops, also serves the lookup of an event's
// operations by key prefix (listOperationsByKeyPrefix), which a default-opclass index cannot under
// a non-C collation.

let database: TestDatabase

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.drop()
})

describe('the operation key index', () => {
  it('is the only index on the key, unique, and serves a key prefix lookup', async () => {
    const indexes = await database.sql<Array<{ name: string; unique: boolean }>>`
      select c.relname as name, i.indisunique as unique
      from pg_index i join pg_class c on c.oid = i.indexrelid
      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
      where i.indrelid = 'operations'::regclass and a.attname = 'operation_key'`
    expect(indexes).toEqual([{ name: 'operations_operation_key_uq', unique: true }])

    const plan = await database.sql.begin(async (tx) => {
      await tx`set local enable_seqscan = off`
      return tx`explain select id from operations where operation_key like ${'acme:evt\\_1:%'}`
    })
    // The prefix as an index range (~>=~ and ~<~, text_pattern_ops' operators), not a filter over
    // the whole index: the test databases' collation (C.UTF-8) is not C to PostgreSQL 15, as most
    // deployments' is not, and a default-opclass index then cannot bound a LIKE.
    const text = plan.map((row) => Object.values(row)[0]).join('\n')
    expect(text).toMatch(/Index (Only )?Scan (using|on) operations_operation_key_uq/)
    expect(text).toMatch(/Index Cond: .*~>=~/)
  })
})
