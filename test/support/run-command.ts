import { spawn } from 'node:child_process'

export interface CommandResult {
  status: number | null
  stdout: string
  stderr: string
}

/**
 * Runs a command to its end with its output collected: how the tests run the CLI and the examples.
 * The environment is only `PATH` and what the caller gives, so nothing of the test's own leaks in.
 */
export function runCommand(
  command: string,
  args: readonly string[],
  options: { cwd: string; env?: Record<string, string> },
): Promise<CommandResult> {
  return new Promise((resolve) => {
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
    child.on('close', (status) => resolve({ status, stdout, stderr }))
  })
}
