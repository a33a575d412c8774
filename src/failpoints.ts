/**
 * Named points at which a test makes the process kill itself with SIGKILL, to prove what the ledger
 * holds after a crash in that window. Selected by HOOKLEDGER_FAILPOINT; a no-op when it is unset.
 */
export type FailpointName =
  | 'receive.before_commit'
  | 'receive.after_commit'
  | 'receive.before_enqueue'
  | 'receive.before_run'
  | 'worker.before_done'
  | 'worker.after_done'
  | 'forward.before_send'
  | 'outbound.before_execute'
  | 'outbound.after_execute'

export interface Failpoints {
  hit(name: FailpointName): void
  isArmed(name: FailpointName): boolean
}

export const noFailpoints: Failpoints = { hit() {}, isArmed: () => false }

export function createFailpoints(selected: string | undefined): Failpoints {
  if (selected === undefined) return noFailpoints
  return {
    hit(name) {
      if (name === selected) process.kill(process.pid, 'SIGKILL')
    },
    isArmed: (name) => name === selected,
  }
}
