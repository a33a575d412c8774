import { describe, expect, it } from 'vitest'
import { DeadlineError, withAbortDeadline, withDeadline } from './deadline.js'

const resolveAfter = <T>(ms: number, value: T) =>
  new Promise<T>((resolve) => setTimeout(() => resolve(value), ms))

describe('deadlines', () => {
  it('withDeadline answers what settles first: the promise, or a DeadlineError with its message', async () => {
    await expect(withDeadline(resolveAfter(5, 'done'), 1000, 'late')).resolves.toBe('done')
    await expect(withDeadline(Promise.reject(new Error('own')), 1000, 'late')).rejects.toThrow('own')
    const late = withDeadline(resolveAfter(1000, 'done'), 20, 'no answer within 20 ms')
    await expect(late).rejects.toBeInstanceOf(DeadlineError)
    await expect(late).rejects.toThrow('no answer within 20 ms')
  })

  it('withAbortDeadline aborts its signal with the DeadlineError it rejects with, and only then', async () => {
    let seen: AbortSignal | undefined
    const answered = await withAbortDeadline(1000, 'late', async (signal) => {
      seen = signal
      return resolveAfter(5, 'done')
    })
    expect(answered).toBe('done')
    await resolveAfter(30, undefined)
    expect(seen?.aborted).toBe(false)

    let abortedWith: unknown
    const late = withAbortDeadline(20, 'handler did not finish within 20 ms', (signal) => {
      signal.addEventListener('abort', () => {
        abortedWith = signal.reason
      })
      return resolveAfter(1000, 'done')
    })
    const error = await late.catch((reason: unknown) => reason)
    expect(error).toBeInstanceOf(DeadlineError)
    expect(abortedWith).toBe(error)
  })

  it('withAbortDeadline rejects with what run throws, even before it returns a promise', async () => {
    const thrown = new Error('at once')
    await expect(
      withAbortDeadline(20, 'late', () => {
        throw thrown
      }),
    ).rejects.toBe(thrown)
  })
})
