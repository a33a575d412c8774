import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Ledger, openLedger, SERVER_KEEPALIVE, serverGivesUpAfterMs } from '../../src/db/client.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { type SilentPath, silencePostgresPorts } from '../support/silent-path.js'

// The server's side of a path that went silent: the sessions of a client it can no longer hear from
// must give their connection slots back, not hold them for the kernel's two hours of keepalive while
// the client's pools open new ones beside them (max_connections reached after one outage).

let database: TestDatabase
const ledgers: Ledger[] = []
const paths: SilentPath[] = []

beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  for (const path of paths) path.heal()
  await Promise.all(ledgers.map((ledger) => ledger.close()))
  await database.drop()
})

interface Session {
  pid: number
  port: number
  name: string
}

async function sessions(): Promise<Session[]> {
  return database.sql<Session[]>`
    select pid, client_port as port, application_name as name from pg_stat_activity
    where datname = current_database() and pid <> pg_backend_pid() and client_port is not null`
}

describe("the server's keepalive on the ledger's sessions", () => {
  it('is asked for by every session of the pool, from its first statement', async () => {
    const ledger = openLedger(database.url, { max: 1 })
    const [settings] = await ledger.sql<{ idle: string; interval: string; count: string; unacked: string }[]>`
      select current_setting('tcp_keepalives_idle') as idle,
             current_setting('tcp_keepalives_interval') as interval,
             current_setting('tcp_keepalives_count') as count,
             current_setting('tcp_user_timeout') as unacked`
    await ledger.close()
    expect(settings).toEqual({
      idle: String(SERVER_KEEPALIVE.idleSeconds),
      interval: String(SERVER_KEEPALIVE.intervalSeconds),
      count: String(SERVER_KEEPALIVE.count),
      unacked: String(serverGivesUpAfterMs(SERVER_KEEPALIVE)),
    })
  })

  it('ends the sessions of a client whose path went silent, idle or answering, where a session without it stays', async () => {
    // Shortened so the test waits seconds, not the production setting's 25 s.
    const keepalive = { idleSeconds: 2, intervalSeconds: 1, count: 2 }
    const ledger = openLedger(database.url, { max: 3, serverKeepalive: keepalive })
    ledgers.push(ledger)
    const plain = postgres(database.url, {
      max: 1,
      onnotice: () => {},
      connection: { application_name: 'plain' },
    })
    await Promise.all([1, 2, 3].map(() => ledger.sql`select pg_sleep(0.1)`.then(() => undefined)))
    await plain`select 1`
    const before = await sessions()
    const ledgerSessions = before.filter((session) => session.name === 'hookledger')
    const plainSession = before.find((session) => session.name === 'plain')
    expect(ledgerSessions).toHaveLength(3)
    expect(plainSession).toBeDefined()

    // One session is running a statement when the path goes silent: its answer goes out into the
    // silence and is never acknowledged, a case keepalive never probes (tcp_user_timeout's).
    const answering = ledger.sql`select pg_sleep(1) as slept`.catch((error: unknown) => error)
    await new Promise((resolve) => setTimeout(resolve, 200))
    const silencedAt = Date.now()
    const path = silencePostgresPorts(before.map((session) => session.port))
    paths.push(path)
    const ledgerPids = new Set(ledgerSessions.map((session) => session.pid))
    let left = before
    while (Date.now() - silencedAt < 15_000) {
      left = await sessions()
      if (!left.some((session) => ledgerPids.has(session.pid))) break
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    const endedAfterMs = Date.now() - silencedAt
    expect(
      left.filter((session) => ledgerPids.has(session.pid)),
      `after ${endedAfterMs} ms`,
    ).toEqual([])
    // Idle for 2 s, then two unanswered probes a second apart, or 4 s of unacknowledged data.
    expect(endedAfterMs).toBeLessThan(10_000)
    // The control: the same silence, the server's defaults (two hours of keepalive): the session stays.
    expect(left.map((session) => session.pid)).toContain(plainSession?.pid)

    path.heal()
    await answering
    await plain.end({ timeout: 1 })
  })
})
