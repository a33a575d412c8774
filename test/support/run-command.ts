import { type ChildProcessByStdio, spawn } from 'node:child_process'
import type { Readable } from 'node:stream'

export interface CommandResult {
  status: number | null
  /** The signal that ended the command, when one did (a test's own SIGKILL, say). */
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

export type RunningCommand = ChildProcessByStdio<null, Readable, Readable>

/**
 * Runs a command to its end with its output collected: how the tests run the CLI and the examples.
 * The environment is only `PATH` and what the caller gives, so nothing of the test's own leaks in.
 */
export function runCommand(
  command: string,
  args: readonly string[],
  options: {
    cwd: string
    env?: Record<string, string>
    /** Past it the command is killed (SIGKILL) and the run fails with what it wrote to stderr. */
    timeoutMs?: number
    /**
     * Called once the command started, to watch its output or signal it while it runs; what it
     * returns is called once the command has ended.
     */
    onSpawn?: (child: RunningCommand) => (() => void) | undefined
  },
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: { PATH: process.env.PATH ?? '', ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
    })
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            child.kill('SIGKILL')
            reject(new Error(`${[command, ...args].join(' ')} ran over ${options.timeoutMs} ms: ${stderr}`))
          }, options.timeoutMs)
    let ended: (() => void) | undefined
    child.on('close', (status, signal) => {
      clearTimeout(timer)
      ended?.()
      resolve({ status, signal, stdout, stderr })
    })
    ended = options.onSpawn?.(child)
  })
}
