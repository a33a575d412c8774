import type { Logger } from '../logger.js'

/**
 * BullMQ 6 prints this with `console.warn` from every connection it opens (six lines at start),
 * outside the JSON log, and has no option to turn it off (`skipVersionCheck` silences it only by
 * also skipping the version detection that picks its commands). hookledger checks the policy itself
 * (redis-health.ts) and logs it as an error with the fix, so this line is superseded.
 */
const EVICTION_WARNING = /^IMPORTANT! Eviction policy is (\S+)\. It should be "noeviction"$/

/**
 * The loggers of the BullMQ backends open in this process. `console` is one per process, so the
 * interception is too: installed once, it passes every other line through untouched.
 */
const loggers: Logger[] = []
let installed = false

/**
 * Routes BullMQ's eviction-policy console line into `logger` at debug level while the returned
 * function has not been called. Only that exact line is caught.
 */
export function routeBullmqWarnings(logger: Logger): () => void {
  if (!installed) {
    installed = true
    const original = console.warn.bind(console)
    console.warn = (...args: unknown[]) => {
      const [first] = args
      const match = typeof first === 'string' && args.length === 1 ? EVICTION_WARNING.exec(first) : null
      const target = loggers.at(-1)
      if (match === null || target === undefined) {
        original(...args)
        return
      }
      target.debug({ policy: match[1] }, 'BullMQ warned of the eviction policy (reported once by hookledger)')
    }
  }
  loggers.push(logger)
  return () => {
    const index = loggers.indexOf(logger)
    if (index >= 0) loggers.splice(index, 1)
  }
}
