// CPU time of the processes a bench section measures, read from /proc (Linux).
import { readdirSync, readFileSync } from 'node:fs'
import type postgres from 'postgres'

/** User plus system CPU of a process so far, in ms (Linux: /proc/<pid>/stat, ticks of 10 ms); 0 once it is gone. */
export function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return 0
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return 0
  }
}

/** CPU of every process with this command name so far (redis-server), in ms. */
export function cpuMsOf(command: string): number {
  let total = 0
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) === command) total += cpuMs(Number(pid))
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return total
}

/** The machine's CPU time so far, busy and in all, in clock ticks (Linux: the first line of /proc/stat). */
export function machineTicks(): { busy: number; total: number } {
  const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number)
  const total = fields.reduce((sum, value) => sum + value, 0)
  // idle and iowait: the cores had nothing to run.
  return { busy: total - (fields[3] ?? 0) - (fields[4] ?? 0), total }
}

/**
 * The CPU of one database's PostgreSQL backends from now on: other databases' backends on the same
 * server (other work on the machine) are not counted. Read `stop()` before the system's processes
 * end, while their backends still exist; one that ended in between is missed.
 */
export async function startBackendsCpu(
  admin: postgres.Sql,
  database: string,
): Promise<{ stop(): Promise<number> }> {
  const snapshot = async () => {
    const rows = await admin<{ pid: number }[]>`
      select pid from pg_stat_activity where datname = ${database} and pid <> pg_backend_pid()`
    return new Map(rows.map(({ pid }) => [pid, cpuMs(pid)]))
  }
  const before = await snapshot()
  return {
    async stop() {
      let total = 0
      for (const [pid, ms] of await snapshot()) total += ms - (before.get(pid) ?? 0)
      return total
    },
  }
}

/** What a system under load cost per event: its process, its database's backends, redis-server, both cores. */
export interface SystemCpuPerEvent {
  processMs: number
  /** Undefined when the system's PostgreSQL is not the server's (embedded mode). */
  postgresMs: number | undefined
  /** The whole redis-server: other databases' traffic on it is counted too. */
  redisMs: number
  /** How busy both cores were, everything on them included (the load generator, the destination). */
  machineBusyPercent: number
}

/**
 * Starts measuring one system's CPU: its process (`pid`), its database's PostgreSQL backends (when
 * `backends` names them), redis-server and the machine. `stop(events)` gives it per event; call it
 * while the process and its backends still run.
 */
export async function startSystemCpu(
  pid: number | undefined,
  backends?: { admin: postgres.Sql; databaseName: string },
): Promise<{ stop(events: number): Promise<SystemCpuPerEvent> }> {
  const processBefore = cpuMs(pid)
  const backendsCpu =
    backends === undefined ? undefined : await startBackendsCpu(backends.admin, backends.databaseName)
  const redisBefore = cpuMsOf('redis-server')
  const ticksBefore = machineTicks()
  return {
    async stop(events) {
      const per = (ms: number) => ms / Math.max(events, 1)
      const processMs = per(cpuMs(pid) - processBefore)
      const postgresMs = backendsCpu === undefined ? undefined : per(await backendsCpu.stop())
      const redisMs = per(cpuMsOf('redis-server') - redisBefore)
      const ticks = machineTicks()
      const machineBusyPercent =
        (100 * (ticks.busy - ticksBefore.busy)) / Math.max(ticks.total - ticksBefore.total, 1)
      return { processMs, postgresMs, redisMs, machineBusyPercent }
    },
  }
}
