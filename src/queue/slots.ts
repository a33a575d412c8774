/**
 * At most `size` tasks at a time, the rest waiting in order. The worker's handlers run under it, so
 * `worker.concurrency` bounds the events in flight however many rows each job carries.
 */
export interface Slots {
  run<T>(task: () => Promise<T>): Promise<T>
}

export function createSlots(size: number): Slots {
  let free = size
  const waiting: Array<() => void> = []
  const release = () => {
    const next = waiting.shift()
    if (next === undefined) free += 1
    else next()
  }
  return {
    async run(task) {
      if (free > 0) free -= 1
      else await new Promise<void>((resolve) => waiting.push(resolve))
      try {
        return await task()
      } finally {
        release()
      }
    },
  }
}
